import { grantsScope, type Scope } from '@lab/permissions';

/**
 * What a route of the public API demands. The scopes themselves (SCOPES) are
 * the permission model's list. Which scope implies
 * which (write implies read; admin and `*` imply every scope) is the permission
 * model's rule (libs/permissions scopes.ts).
 */

/** What a route demands: a scope, or nothing beyond authentication. */
export type RouteScope = Scope | 'none';

export function hasScope(granted: readonly string[], required: RouteScope): boolean {
  return required === 'none' || grantsScope(granted, required);
}

/** The message of a 403 insufficient_scope, naming the missing scope. */
export const missingScopeMessage = (required: Scope): string => `token lacks the ${required} scope`;
