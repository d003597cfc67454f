import { sql } from 'drizzle-orm';
import { DomainError, newId, type CallerContext, type ServiceDeps, type Tx, sqlArray } from '@lab/kit';
import type { identity } from '@lab/contracts';
import { requireMember } from './members.js';
import { requireOrg } from './orgs.js';
import { lockGrant, lockSession, revokeGrant, revokeWhere } from './revocation.js';
import { displayPrefix, hashToken, newApiKey, newPrefixedToken, type TokenKind } from './tokens.js';
import { getUser } from './users.js';

// the revocation primitives, where the token modules have always found them
export { lockGrant, lockSession, revokeGrant, revokeWhere } from './revocation.js';

export interface NewToken {
  kind: TokenKind;
  name: string | null;
  org_id: string | null;
  user_id: string | null;
  scopes: readonly string[];
  connector_id?: string | null;
  device_ids?: readonly string[];
  session_id?: string | null;
  /** OAuth grant the token was issued under */
  grant_id?: string | null;
  ttl_seconds?: number;
}

/** Stores the hash of a fresh token of `kind` and returns its id and plain text. */
export async function insertToken(tx: Tx, t: NewToken): Promise<{ id: string; token: string }> {
  const id = newId();
  const token = t.kind === 'api_key' ? newApiKey(t.org_id!) : newPrefixedToken(t.kind);
  await tx.execute(sql`insert into identity.tokens
      (id, kind, token_hash, display_prefix, name, org_id, user_id, scopes, connector_id, device_ids, session_id, grant_id, expires_at)
    values (${id}, ${t.kind}, ${hashToken(token)}, ${displayPrefix(t.kind, token)}, ${t.name}, ${t.org_id}, ${t.user_id}, ${sqlArray(t.scopes)}::text[],
      ${t.connector_id ?? null}, ${sqlArray(t.device_ids ?? [])}::uuid[], ${t.session_id ?? null}, ${t.grant_id ?? null},
      ${t.ttl_seconds === undefined ? null : sql`now() + ${t.ttl_seconds} * interval '1 second'`})`);
  return { id, token };
}

/** What the audit log keeps of a token: never its hash or plain text. */
const tokenSnapshot = (id: string, t: NewToken) => ({
  id,
  kind: t.kind,
  name: t.name,
  org_id: t.org_id,
  user_id: t.user_id,
  scopes: [...t.scopes],
  connector_id: t.connector_id ?? null,
  device_ids: [...(t.device_ids ?? [])],
});

async function issue(deps: ServiceDeps, caller: CallerContext, t: NewToken, check: (tx: Tx) => Promise<void>): Promise<identity.IssuedToken> {
  return deps.outbox.write(caller, async (tx, emit) => {
    await check(tx);
    const { id, token } = await insertToken(tx, t);
    emit.audit(t.org_id, { action: 'create', resource: t.kind, record_id: id, after: tokenSnapshot(id, t) });
    return {
      id,
      token,
      scopes: [...t.scopes],
      ...(t.user_id ? { user_id: t.user_id } : {}),
      ...(t.org_id ? { org_id: t.org_id } : {}),
    };
  });
}

export function createApiKey(
  deps: ServiceDeps,
  caller: CallerContext,
  input: { org_id: string; name: string; scopes: string[]; user_id?: string; connector_id?: string; device_ids: string[] },
): Promise<identity.IssuedToken> {
  const t: NewToken = {
    kind: 'api_key',
    name: input.name,
    org_id: input.org_id,
    user_id: input.user_id ?? null,
    scopes: input.scopes,
    connector_id: input.connector_id ?? null,
    device_ids: input.device_ids,
  };
  return issue(deps, caller, t, async (tx) => {
    await requireOrg(deps, input.org_id, tx);
    if (input.user_id) await requireMember(deps, input.org_id, input.user_id, tx);
  });
}

export function createPat(
  deps: ServiceDeps,
  caller: CallerContext,
  input: { user_id: string; name: string; scopes: string[]; org_id?: string },
): Promise<identity.IssuedToken> {
  const t: NewToken = { kind: 'pat', name: input.name, org_id: input.org_id ?? null, user_id: input.user_id, scopes: input.scopes };
  return issue(deps, caller, t, async (tx) => {
    await getUser(deps, input.user_id, tx);
    if (input.org_id) {
      await requireOrg(deps, input.org_id, tx);
      await requireMember(deps, input.org_id, input.user_id, tx);
    }
  });
}

/** Revokes a token; a session or refresh token takes the rest of its sign-in session with it, an OAuth token its grant. */
export async function revokeToken(deps: ServiceDeps, caller: CallerContext, tokenId: string): Promise<void> {
  await deps.outbox.write(caller, async (tx, emit) => {
    // no row lock on the token: its grant or session is locked first (lockGrant, lockSession)
    const [tok] = await deps.db.rows<{ id: string; session_id: string | null; grant_id: string | null }>(
      sql`select id, session_id, grant_id from identity.tokens where id = ${tokenId}`,
      tx,
    );
    if (!tok) throw DomainError.notFound('token not found');
    if (tok.grant_id) {
      await lockGrant(tx, tok.grant_id);
      await revokeGrant(tx, emit, tok.grant_id);
      return;
    }
    if (tok.session_id) await lockSession(tx, tok.session_id);
    await revokeWhere(tx, emit, tok.session_id ? { session_id: tok.session_id } : { token_id: tok.id });
  });
}
