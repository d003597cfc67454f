import { callerIn, type Ctx, type Deps } from '../request.js';

/**
 * Fails with not_found unless identity knows the organisation of a management
 * route. Services other than identity keep no list of organisations, so without
 * this check an operator typo would create endpoints, subscriptions or points
 * for an organisation that does not exist (found by the fuzz test).
 */
export async function requireKnownOrg(orgId: string, ctx: Ctx, deps: Deps): Promise<void> {
  await deps.clients.identity().call('getOrg', { org_id: orgId }, callerIn(ctx));
}
