import { DomainError, isAdministrator, type CallerContext } from '@lab/kit';

/**
 * Who may do what with orders. Every member of the organisation reads orders
 * and released results (the gateway has checked the read scope). Creating an
 * order and recording a result need a writing role (not viewer); a token
 * without a user writes what its scope allows. Releasing a result is a
 * quality decision: role admin or qm, or, for a token without a user, the
 * admin scope (as deleting records is).
 */
export function assertCanWrite(caller: CallerContext): void {
  if (caller.user_id && caller.role === 'viewer') throw DomainError.forbidden('the viewer role cannot change lab orders');
}

export function assertCanRelease(caller: CallerContext): void {
  if (caller.user_id) {
    if (caller.role === 'admin' || caller.role === 'qm') return;
    throw DomainError.forbidden('releasing a result needs the admin or qm role', 'forbidden', { required_roles: ['admin', 'qm'] });
  }
  if (isAdministrator(caller)) return;
  throw DomainError.forbidden('releasing a result with a token without a user needs the admin scope', 'forbidden', { required_scope: 'admin' });
}
