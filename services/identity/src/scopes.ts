import { roleMay } from '@lab/permissions';

/**
 * Token scopes of the public API. Pure, like tokens.ts, so the gateway can check
 * a principal's scopes without pulling in anything else.
 */
export const SCOPES = ['read', 'write', 'audit:read', 'admin', '*', 'devices:register'] as const;
export type Scope = (typeof SCOPES)[number];

const ALL = new Set<string>(SCOPES);

export const isScope = (s: string): s is Scope => ALL.has(s);

/** Scopes that are not in the allowed set (empty when all are fine). */
export const unknownScopes = (scopes: readonly string[]): string[] => scopes.filter((s) => !ALL.has(s));

/** Scopes only an organisation's administrators may hold through a user's consent (OAuth). */
const ADMIN_ONLY_SCOPES: readonly string[] = ['admin', 'audit:read', '*'];

/** The scopes a member of `role` may hold through an OAuth grant: admin-only scopes need a role that may administer. */
export function scopesForRole(scopes: readonly string[], role: string | null): string[] {
  return roleMay(role, 'administer') ? [...scopes] : scopes.filter((s) => !ADMIN_ONLY_SCOPES.includes(s));
}
