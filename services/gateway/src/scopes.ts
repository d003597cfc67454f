import { grantsScope } from '@lab/permissions';

/**
 * Token scope rules of the public API, pure so they can be tested alone.
 *   write implies read; admin and `*` imply every scope.
 */
export const SCOPES = ['read', 'write', 'audit:read', 'admin', '*', 'devices:register'] as const;
export type Scope = (typeof SCOPES)[number];

/** What a route demands: a scope, or nothing beyond authentication. */
export type RouteScope = Scope | 'none';

export function hasScope(granted: readonly string[], required: RouteScope): boolean {
  return required === 'none' || grantsScope(granted, required);
}

/** The message of a 403 insufficient_scope, naming the missing scope. */
export const missingScopeMessage = (required: Scope): string => `token lacks the ${required} scope`;
