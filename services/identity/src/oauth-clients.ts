import { createHash, timingSafeEqual } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { DomainError, newId, isUuid, type CallerContext, type Executor, type ServiceDeps, sqlArray } from '@lab/kit';
import type { identity } from '@lab/contracts';
import { iso } from './sql.js';
import { lockGrant, revokeGrant } from './token-store.js';
import { hashToken, newClientSecret } from './tokens.js';

/**
 * Registered OAuth clients. Every client is confidential: its secret (256 random
 * bits) is stored as a SHA-256 hash, which is enough for a high-entropy secret,
 * and compared in constant time.
 */
export interface ClientRow {
  id: string;
  name: string;
  secret_hash: string;
  redirect_uris: string[];
  scopes: string[];
  created_at: string;
}

export const invalidClient = () => DomainError.unauthenticated('client authentication failed', 'invalid_client');

export async function createOAuthClient(
  deps: ServiceDeps,
  caller: CallerContext,
  input: { name: string; redirect_uris: string[]; scopes: string[] },
): Promise<identity.OAuthClientCredentials> {
  const id = newId();
  const secret = newClientSecret();
  await deps.outbox.write(caller, async (tx, emit) => {
    await tx.execute(sql`insert into identity.oauth_clients (id, name, secret_hash, redirect_uris, scopes)
      values (${id}, ${input.name}, ${hashToken(secret)}, ${sqlArray(input.redirect_uris)}::text[], ${sqlArray(input.scopes)}::text[])`);
    emit.audit(null, { action: 'create', resource: 'oauth_client', record_id: id, after: { id, ...input } });
  });
  return { client_id: id, client_secret: secret };
}

export async function findClient(deps: ServiceDeps, clientId: string, exec?: Executor): Promise<ClientRow | null> {
  if (!isUuid(clientId)) return null;
  const [row] = await deps.db.rows<ClientRow>(
    sql`select id, name, secret_hash, redirect_uris, scopes, ${iso(sql`created_at`)} as created_at
        from identity.oauth_clients where id = ${clientId.toLowerCase()} and deleted_at is null`,
    exec,
  );
  return row ?? null;
}

export async function getOAuthClient(deps: ServiceDeps, clientId: string): Promise<identity.OAuthClient> {
  const c = await findClient(deps, clientId);
  if (!c) throw DomainError.notFound('no such OAuth client', 'invalid_client');
  return { client_id: c.id, name: c.name, redirect_uris: c.redirect_uris, scopes: c.scopes, created_at: c.created_at };
}

/**
 * Deletes a client: it is marked deleted (its grants and codes keep pointing at
 * its row), so it authenticates no more and cannot be found; every grant made
 * to it is revoked, and with them every access and refresh token issued under
 * them (gateways drop those on the revocation events).
 */
export async function deleteOAuthClient(deps: ServiceDeps, caller: CallerContext, clientId: string): Promise<void> {
  await deps.outbox.write(caller, async (tx, emit) => {
    const [c] = await deps.db.rows<{ id: string; name: string }>(
      sql`update identity.oauth_clients set deleted_at = now() where id = ${clientId} and deleted_at is null returning id, name`,
      tx,
    );
    if (!c) throw DomainError.notFound('no such OAuth client');
    // Its codes are spent first. An exchange under way holds its code's row, so this
    // waits for it and the tokens it issued are revoked below; an exchange coming
    // after finds the code used. Without it, an exchange that had read the grant
    // before the revocation could issue live tokens for a deleted client.
    await tx.execute(sql`update identity.oauth_codes set used_at = coalesce(used_at, now()) where client_id = ${c.id}`);
    // each grant locked before its tokens, as a refresh takes them (see lockGrant)
    const grants = await deps.db.rows<{ id: string }>(sql`select id from identity.oauth_grants where client_id = ${c.id} order by id`, tx);
    for (const g of grants) {
      await lockGrant(tx, g.id);
      await revokeGrant(tx, emit, g.id);
    }
    emit.audit(null, { action: 'delete', resource: 'oauth_client', record_id: c.id, before: { id: c.id, name: c.name }, after: { grants_revoked: grants.length } });
  });
}

/** The client named by id and secret, or invalid_client (unknown id and wrong secret alike). */
export async function authenticateClient(deps: ServiceDeps, auth: { client_id: string; client_secret: string }): Promise<ClientRow> {
  const c = await findClient(deps, auth.client_id);
  const given = createHash('sha256').update(auth.client_secret, 'utf8').digest();
  // Unknown clients still spend one comparison, against a hash no secret has.
  const stored = Buffer.from(c?.secret_hash ?? '0'.repeat(64), 'hex');
  if (!timingSafeEqual(given, stored) || !c) throw invalidClient();
  return c;
}
