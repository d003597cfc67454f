import { createHash, timingSafeEqual } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { DomainError, newId, isUuid, type CallerContext, type Executor, type ServiceDeps, sqlArray } from '@lab/kit';
import type { identity } from '@lab/contracts';
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
    sql`select id, name, secret_hash, redirect_uris, scopes from identity.oauth_clients where id = ${clientId.toLowerCase()}`,
    exec,
  );
  return row ?? null;
}

export async function getOAuthClient(deps: ServiceDeps, clientId: string): Promise<identity.OAuthClient> {
  const c = await findClient(deps, clientId);
  if (!c) throw DomainError.notFound('no such OAuth client', 'invalid_client');
  return { client_id: c.id, name: c.name, redirect_uris: c.redirect_uris, scopes: c.scopes };
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
