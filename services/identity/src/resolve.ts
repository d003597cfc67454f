import { sql } from 'drizzle-orm';
import { DomainError, type ServiceDeps } from '@lab/kit';
import type { identity } from '@lab/contracts';
import { toPrincipal, type TokenContextRow } from './principal.js';

/** How stale last_used_at may get before a resolve refreshes it. */
const LAST_USED_GRANULARITY = sql`interval '5 minutes'`;

/**
 * The hot path: one indexed query (token by hash, its org, the membership of
 * its user there), then the pure rules of toPrincipal. Nothing is cached here,
 * so a removed member or a revoked token fails on the very next call.
 */
export async function resolveToken(deps: ServiceDeps, tokenHash: string, requestedOrgId?: string): Promise<identity.Principal> {
  const [row] = await deps.db.rows<TokenContextRow & { touch: boolean }>(sql`
    select t.id as token_id, t.kind, t.user_id, t.org_id as bound_org_id, t.scopes, t.connector_id, t.device_ids,
           o.id as org_id, o.modules, o.rate_per_minute as per_minute, o.rate_per_hour as per_hour,
           m.role, m.department_id, g.resource as audience,
           (t.last_used_at is null or t.last_used_at < now() - ${LAST_USED_GRANULARITY}) as touch
    from identity.tokens t
    left join identity.orgs o on o.id = coalesce(t.org_id, ${requestedOrgId ?? null}::uuid)
    left join identity.memberships m on m.org_id = o.id and m.user_id = t.user_id
    left join identity.oauth_grants g on g.id = t.grant_id
    where t.token_hash = ${tokenHash} and t.revoked_at is null and (t.expires_at is null or t.expires_at > now())`);
  const principal = toPrincipal(row ?? null, requestedOrgId);
  if (row!.touch) touch(deps, row!.token_id);
  return principal;
}

/** Best effort and off the response path: usage time is informational only. */
function touch(deps: ServiceDeps, tokenId: string): void {
  deps.db
    .rows(sql`update identity.tokens set last_used_at = now() where id = ${tokenId}`)
    .catch((err: unknown) => deps.log.debug({ err, token_id: tokenId }, 'last_used_at not updated'));
}

/** The user of a live sign-in access token (ses_): no organisation is needed to know who it is. */
export async function resolveSessionUser(deps: ServiceDeps, tokenHash: string): Promise<identity.User> {
  const [row] = await deps.db.rows<{ id: string; email: string; name: string | null }>(sql`
    select u.id, u.email, u.name from identity.tokens t join identity.users u on u.id = t.user_id
    where t.token_hash = ${tokenHash} and t.kind = 'session' and t.revoked_at is null and t.expires_at > now()`);
  if (!row) throw DomainError.unauthenticated();
  return { id: row.id, email: row.email, ...(row.name !== null ? { name: row.name } : {}) };
}
