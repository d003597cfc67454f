/**
 * The two access rules every part of the service applies, written once.
 *
 * Scopes (of a token): a token holds a scope when it was granted that scope, or
 * `admin` or `*` (each implies every scope); `write` implies `read`.
 *
 * Administrators (of the caller's organisation): a user is one when their role in
 * the organisation is `admin`; a token without a user (an API key not bound to
 * one) is one when it holds the `admin` scope or `*`.
 *
 * Role rules beyond these (who may write, sign, release, see a department's
 * records) belong to the service that owns the data.
 */

/** Whether `granted` scopes allow `required`. */
export function grantsScope(granted: readonly string[], required: string): boolean {
  if (granted.includes(required) || granted.includes('admin') || granted.includes('*')) return true;
  return required === 'read' && granted.includes('write');
}

/** Whether the caller administers its organisation (see the rule above). */
export function isAdministrator(who: { user_id?: string | null; role?: string | null; scopes: readonly string[] }): boolean {
  if (who.user_id) return who.role === 'admin';
  return who.scopes.includes('admin') || who.scopes.includes('*');
}
