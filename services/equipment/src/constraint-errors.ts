import { DomainError, validationFailed, type ConstraintRules } from '@lab/kit';

/**
 * Constraints that state a business rule, and the error a client gets when a
 * write runs into one. The database is the last word under concurrency (two
 * starts racing for the one open session), so its verdict is translated (kit's
 * withConstraintErrors) instead of surfacing as a 500.
 */
export const CONSTRAINT_RULES: ConstraintRules = {
  usage_sessions_one_open_idx: () => DomainError.conflict('a usage session of this equipment is already in progress', 'usage_in_progress'),
  usage_sessions_ended_after_start: () => validationFailed([{ path: 'ended_at', message: 'ended_at must not be before started_at' }]),
  remote_links_equipment_key: () => DomainError.conflict('this equipment already has a remote link', 'remote_link_exists'),
};
