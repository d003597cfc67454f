import { roleMay } from '@lab/permissions';

/**
 * Token scopes an OAuth grant may carry. The list of scopes (SCOPES, isScope,
 * unknownScopes) is the permission model's (libs/permissions scopes.ts).
 */

/** Scopes only an organisation's administrators may hold through a user's consent (OAuth). */
const ADMIN_ONLY_SCOPES: readonly string[] = ['admin', 'audit:read', '*'];

/** The scopes a member of `role` may hold through an OAuth grant: admin-only scopes need a role that may administer. */
export function scopesForRole(scopes: readonly string[], role: string | null): string[] {
  return roleMay(role, 'administer') ? [...scopes] : scopes.filter((s) => !ADMIN_ONLY_SCOPES.includes(s));
}
