import { createHash, timingSafeEqual } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { DomainError, newId, isUuid, type CallerContext, type Executor, type ServiceDeps, sqlArray } from '@lab/kit';
import type { identity } from '@lab/contracts';
import { iso } from './sql.js';
import { lockGrant, revokeGrant } from './token-store.js';
import { hashToken, newClientSecret } from './tokens.js';

/**
 * Registered OAuth clients. A confidential client (registered by the operator,
 * for the spec's oauth-authorize) has a secret (256 random bits) stored as a
 * SHA-256 hash, which is enough for a high-entropy secret, and compared in
 * constant time. A public client (registered dynamically by an MCP client at the
 * identity provider) has none; PKCE and the resource binding stand in for it.
 */
export interface ClientRow {
  id: string;
  name: string;
  /** null for a public client */
  secret_hash: string | null;
  public: boolean;
  redirect_uris: string[];
  scopes: string[];
  created_at: string;
  /** the client ID metadata document's URL of a client named by one, else null */
  metadata_url: string | null;
}

const invalidClient = () => DomainError.unauthenticated('client authentication failed', 'invalid_client');

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

export const toClient = (c: Omit<ClientRow, 'secret_hash'>): identity.OAuthClient => ({
  client_id: c.id,
  name: c.name,
  redirect_uris: c.redirect_uris,
  scopes: c.scopes,
  created_at: c.created_at,
  public: c.public,
  ...(c.metadata_url ? { metadata_url: c.metadata_url } : {}),
});

/** RFC 7591 registration of a public client: nothing secret is issued, so nothing is returned only once. */
export async function registerPublicOAuthClient(
  deps: ServiceDeps,
  caller: CallerContext,
  input: { name: string; redirect_uris: string[]; scopes: string[]; metadata_url?: string },
): Promise<identity.OAuthClient> {
  if (input.metadata_url !== undefined) return documentClient(deps, caller, { ...input, metadata_url: input.metadata_url });
  const id = newId();
  const [row] = await deps.outbox.write(caller, async (tx, emit) => {
    const rows = await deps.db.rows<ClientRow>(
      sql`insert into identity.oauth_clients (id, name, secret_hash, public, redirect_uris, scopes)
        values (${id}, ${input.name}, null, true, ${sqlArray(input.redirect_uris)}::text[], ${sqlArray(input.scopes)}::text[])
        returning ${CLIENT_COLUMNS}`,
      tx,
    );
    emit.audit(null, { action: 'create', resource: 'oauth_client', record_id: id, after: { id, public: true, ...input } });
    return rows;
  });
  return toClient(row!);
}

/**
 * The client named by a metadata document (its URL is its client_id), as the
 * gateway last read the document: created on first use, its name, redirect URIs
 * and scopes brought up to date when the document changed, left alone (no write,
 * no audit entry) when it did not. Two first uses at once: the unique index lets
 * one insert, the other updates (or finds nothing to change).
 */
async function documentClient(
  deps: ServiceDeps,
  caller: CallerContext,
  input: { name: string; redirect_uris: string[]; scopes: string[]; metadata_url: string },
): Promise<identity.OAuthClient> {
  const id = newId();
  const [row] = await deps.outbox.write(caller, async (tx, emit) => {
    const rows = await deps.db.rows<ClientRow & { inserted: boolean }>(
      sql`insert into identity.oauth_clients as c (id, name, secret_hash, public, redirect_uris, scopes, metadata_url)
        values (${id}, ${input.name}, null, true, ${sqlArray(input.redirect_uris)}::text[], ${sqlArray(input.scopes)}::text[], ${input.metadata_url})
        on conflict (metadata_url) where metadata_url is not null and deleted_at is null do update
          set name = excluded.name, redirect_uris = excluded.redirect_uris, scopes = excluded.scopes
          where (c.name, c.redirect_uris, c.scopes) is distinct from (excluded.name, excluded.redirect_uris, excluded.scopes)
        returning ${CLIENT_COLUMNS}, (xmax = 0) as inserted`,
      tx,
    );
    const changed = rows[0];
    if (changed) {
      const { inserted, ...c } = changed;
      emit.audit(null, {
        action: inserted ? 'create' : 'update',
        resource: 'oauth_client',
        record_id: c.id,
        after: { id: c.id, public: true, ...input },
      });
      return [c];
    }
    return [await findClient(deps, input.metadata_url, tx)];
  });
  if (!row) throw DomainError.unavailable('the client changed meanwhile; try again');
  return toClient(row);
}

const CLIENT_COLUMNS = sql`id, name, secret_hash, public, redirect_uris, scopes, ${iso(sql`created_at`)} as created_at, metadata_url`;

/** By its UUID, or for a client of a metadata document by the document's URL (what it sends as client_id). */
export async function findClient(deps: ServiceDeps, clientId: string, exec?: Executor): Promise<ClientRow | null> {
  const where = clientId.startsWith('https://') ? sql`metadata_url = ${clientId}` : isUuid(clientId) ? sql`id = ${clientId.toLowerCase()}` : undefined;
  if (!where) return null;
  const [row] = await deps.db.rows<ClientRow>(sql`select ${CLIENT_COLUMNS} from identity.oauth_clients where ${where} and deleted_at is null`, exec);
  return row ?? null;
}

export async function getOAuthClient(deps: ServiceDeps, clientId: string): Promise<identity.OAuthClient> {
  const c = await findClient(deps, clientId);
  if (!c) throw DomainError.notFound('no such OAuth client', 'invalid_client');
  return toClient(c);
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
    emit.audit(null, {
      action: 'delete',
      resource: 'oauth_client',
      record_id: c.id,
      before: { id: c.id, name: c.name },
      after: { grants_revoked: grants.length },
    });
  });
}

export interface ClientAuth {
  client_id: string;
  client_secret: string;
  /** the endpoint speaks for public clients: no secret, and a confidential client does not match */
  public: boolean;
}

/**
 * The client named by id and secret, or invalid_client (unknown id and wrong
 * secret alike). Each kind authenticates only at its own token endpoint: a public
 * client cannot be used at the spec's oauth-token, nor a confidential client
 * without its secret at the identity provider's.
 */
export async function authenticateClient(deps: ServiceDeps, auth: ClientAuth): Promise<ClientRow> {
  const c = await findClient(deps, auth.client_id);
  if (auth.public) {
    if (!c || !c.public || auth.client_secret !== '') throw invalidClient();
    return c;
  }
  const given = createHash('sha256').update(auth.client_secret, 'utf8').digest();
  // Unknown (and public) clients still spend one comparison, against a hash no secret has.
  const stored = Buffer.from(c?.secret_hash ?? '0'.repeat(64), 'hex');
  if (!timingSafeEqual(given, stored) || !c || c.public) throw invalidClient();
  return c;
}
