import { systemContext, type CallerContext } from './context.js';
import { DomainError } from './errors.js';

/**
 * The one check of the management API's calls, made by the service that owns
 * them: the gateway reaches these RPCs only with the operator token, but a
 * service does not lean on that (any peer holding the signing key can call it),
 * so a caller of another kind is refused here, PERMISSION_DENIED / 403
 * `operator_only`. `what` names the thing refused, for the message ("verifying
 * the audit chain").
 */
export function assertOperator(caller: CallerContext, what: string): void {
  if (caller.token_kind !== 'operator') throw operatorOnly(what);
}

/**
 * As assertOperator, and also for the platform's own calls (token_kind
 * `system`): for the management RPCs that a service or a job also calls on its
 * own behalf, never on a user's.
 */
export function assertOperatorOrSystem(caller: CallerContext, what: string): void {
  if (caller.token_kind !== 'operator' && caller.token_kind !== 'system') throw operatorOnly(what);
}

const operatorOnly = (what: string) => DomainError.forbidden(`${what} needs the operator token`, 'operator_only');

/** The caller the gateway makes of the management API's operator token. */
export function operatorContext(request_id: string, org_id: string | null = null): CallerContext {
  return { ...systemContext(request_id, org_id), token_kind: 'operator' };
}
