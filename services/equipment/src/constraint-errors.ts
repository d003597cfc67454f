import { DomainError, validationFailed } from '@lab/kit';

/**
 * Constraints that state a business rule, and the error a client gets when a
 * write runs into one. The database is the last word under concurrency (two
 * starts racing for the one open session), so its verdict is translated here
 * instead of surfacing as a 500.
 */
const RULES: Record<string, () => DomainError> = {
  usage_sessions_one_open_idx: () =>
    DomainError.conflict('a usage session of this equipment is already in progress', 'usage_in_progress'),
  usage_sessions_ended_after_start: () => validationFailed([{ path: 'ended_at', message: 'ended_at must not be before started_at' }]),
  remote_links_equipment_key: () => DomainError.conflict('this equipment already has a remote link', 'remote_link_exists'),
};

interface PgLikeError {
  code?: string;
  constraint?: string;
  message?: string;
  cause?: unknown;
}

/** The violated constraint's name (pg and PGlite errors, possibly wrapped by drizzle). */
export function violatedConstraint(err: unknown): string | undefined {
  for (let e = err as PgLikeError | undefined, depth = 0; e && depth < 5; e = e.cause as PgLikeError | undefined, depth++) {
    if (e.code !== '23505' && e.code !== '23514') continue;
    if (e.constraint) return e.constraint;
    return Object.keys(RULES).find((name) => e!.message?.includes(`"${name}"`));
  }
  return undefined;
}

/** The client-facing error for a rule's constraint violation, or the error unchanged. */
export function translateConstraintError(err: unknown): unknown {
  const name = violatedConstraint(err);
  const rule = name ? RULES[name] : undefined;
  return rule ? rule() : err;
}

/** Wraps every handler of a gRPC service so rule violations become DomainErrors. */
export function withConstraintErrors<H extends Record<string, (...args: never[]) => Promise<unknown>>>(handlers: H): H {
  const out: Record<string, unknown> = {};
  for (const [name, fn] of Object.entries(handlers)) {
    out[name] = async (...args: never[]) => {
      try {
        return await fn(...args);
      } catch (err) {
        throw translateConstraintError(err);
      }
    };
  }
  return out as H;
}
