import { sql } from 'drizzle-orm';
import { lockKey, rows, type Emitter, type Tx } from '@lab/kit';

/**
 * Revoking tokens and OAuth grants inside a caller's transaction. Apart from
 * token-store.ts, which issues tokens and so checks memberships: the membership
 * writes (members.ts) end grants here, and would otherwise import themselves
 * back through token-store.
 */

interface RevokedRow {
  id: string;
  kind: string;
  org_id: string | null;
  user_id: string | null;
}

/**
 * Revokes the given live tokens, or every live token of a sign-in session, and
 * emits one `identity.token.revoked` per token so gateway caches drop them.
 */
export async function revokeWhere(tx: Tx, emit: Emitter, target: { token_id: string } | { session_id: string } | { grant_id: string }): Promise<RevokedRow[]> {
  const where =
    'token_id' in target ? sql`id = ${target.token_id}` : 'session_id' in target ? sql`session_id = ${target.session_id}` : sql`grant_id = ${target.grant_id}`;
  const revoked = await rows<RevokedRow>(
    tx,
    sql`update identity.tokens set revoked_at = now()
        where ${where} and revoked_at is null returning id, kind, org_id, user_id`,
  );
  for (const row of revoked) {
    emit.event('identity.token.revoked', row.org_id, { token_id: row.id });
    emit.audit(row.org_id, {
      action: 'revoke',
      resource: row.kind,
      record_id: row.id,
      before: { revoked: false },
      after: { revoked: true },
    });
  }
  return revoked;
}

/**
 * Serialises the writes of one sign-in session (a refresh, a revocation) in this
 * transaction. A session has no row of its own to lock; without this, a refresh and
 * a revocation running together could each lock one token and wait for the other's
 * (a deadlock), or the revocation could miss the pair the refresh was issuing.
 */
export const lockSession = (tx: Tx, sessionId: string): Promise<void> => lockKey(tx, `identity.session.${sessionId}`);

/**
 * Locks an OAuth grant's row before any of its tokens. A refresh and a token's
 * revocation take it first; revokeGrant (a code's replay too) updates the grant
 * before its tokens. So writes of one grant's tokens queue on the grant instead of
 * deadlocking on each other's tokens, and a revocation cannot miss the pair a
 * refresh is issuing.
 */
export async function lockGrant(tx: Tx, grantId: string): Promise<void> {
  await tx.execute(sql`select 1 from identity.oauth_grants where id = ${grantId} for no key update`);
}

/** Ends an OAuth grant: it issues nothing more, and every live token issued under it stops working. */
export async function revokeGrant(tx: Tx, emit: Emitter, grantId: string): Promise<void> {
  await tx.execute(sql`update identity.oauth_grants set revoked_at = now() where id = ${grantId} and revoked_at is null`);
  await revokeWhere(tx, emit, { grant_id: grantId });
}

/** Why a member's grants in an organisation end (kept in the audit entry of each). */
export type GrantEnding = 'member_removed' | 'role_lowered';

/**
 * Ends every live OAuth grant `userId` holds in `orgId`, with their refresh and
 * access tokens: consent was given by a member in a role, and a grant must not
 * outlive either (RFC 9700 4.14). Called in the transaction that removes the
 * membership or lowers its role, once the membership row is locked: a refresh
 * racing it waits on the grant's lock and then finds the grant revoked, and a
 * consent racing it waits on the membership row (createOAuthCode locks it).
 * The grants are locked in id order so two such calls cannot deadlock.
 */
export async function endGrantsOfMember(tx: Tx, emit: Emitter, orgId: string, userId: string, why: GrantEnding): Promise<void> {
  const grants = await rows<{ id: string }>(
    tx,
    sql`select id from identity.oauth_grants where org_id = ${orgId} and user_id = ${userId} and revoked_at is null
        order by id for no key update`,
  );
  for (const g of grants) {
    await revokeGrant(tx, emit, g.id);
    emit.audit(orgId, { action: 'revoke', resource: 'oauth_grant', record_id: g.id, before: { revoked: false }, after: { revoked: true, reason: why } });
  }
}
