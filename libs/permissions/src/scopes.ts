/**
 * Scopes (of a token): a token holds a scope when it was granted that scope, or
 * `admin` or `*` (each implies every scope); `write` implies `read`.
 */

/** Scopes that make a token without a user an administrator (they imply every scope). */
export const ADMIN_SCOPES: readonly string[] = ['admin', '*'];

/** Whether `granted` scopes allow `required`. */
export function grantsScope(granted: readonly string[], required: string): boolean {
  if (granted.includes(required) || hasAdminScope(granted)) return true;
  return required === 'read' && granted.includes('write');
}

/** Whether the scopes include one that implies every scope (admin or `*`). */
export const hasAdminScope = (granted: readonly string[]): boolean => ADMIN_SCOPES.some((s) => granted.includes(s));

/**
 * Every scope a token may hold, the one list: identity grants from it and
 * validates against it, the gateway's routes demand from it.
 */
export const SCOPES = ['read', 'write', 'audit:read', 'admin', '*', 'devices:register'] as const;
export type Scope = (typeof SCOPES)[number];

const ALL_SCOPES = new Set<string>(SCOPES);

export const isScope = (s: string): s is Scope => ALL_SCOPES.has(s);

/** Scopes that are not in the allowed set (empty when all are fine). */
export const unknownScopes = (scopes: readonly string[]): string[] => scopes.filter((s) => !ALL_SCOPES.has(s));
