import { sql } from 'drizzle-orm';
import { DomainError, newId, type CallerContext, type Emitter, type ServiceDeps, type Tx } from '@lab/kit';
import type { identity } from '@lab/contracts';
import { SESSION_ACCESS_TTL_SECONDS, SESSION_REFRESH_TTL_SECONDS, SESSION_SCOPES } from './model.js';
import { findWithPassword } from './passwords.js';
import { insertToken, lockSession, revokeWhere } from './token-store.js';
import { hashToken } from './tokens.js';
import { findCredentials } from './users.js';

/**
 * User sign-in. A password grant opens a session: one refresh token (30 days)
 * and one access token (1 hour), all sharing a session id. A refresh grant
 * revokes the used refresh token and the session's access tokens and issues a
 * new pair in the same session. A refresh token presented again after it was
 * rotated is treated as stolen: the whole session is revoked.
 */
const invalidGrant = () => new DomainError('invalid', 'invalid_grant', 'invalid credentials or refresh token');

async function issuePair(tx: Tx, emit: Emitter, userId: string, sessionId: string): Promise<identity.SessionTokens> {
  const base = { name: null, org_id: null, user_id: userId, scopes: SESSION_SCOPES, session_id: sessionId };
  const refresh = await insertToken(tx, { ...base, kind: 'refresh', ttl_seconds: SESSION_REFRESH_TTL_SECONDS });
  const access = await insertToken(tx, { ...base, kind: 'session', ttl_seconds: SESSION_ACCESS_TTL_SECONDS });
  emit.audit(null, {
    action: 'create',
    resource: 'session',
    record_id: sessionId,
    after: { user_id: userId, access_token_id: access.id, refresh_token_id: refresh.id },
  });
  return { access_token: access.token, expires_in: SESSION_ACCESS_TTL_SECONDS, refresh_token: refresh.token, user_id: userId, revoked_token_ids: [] };
}

export async function passwordGrant(deps: ServiceDeps, caller: CallerContext, email: string, password: string): Promise<identity.SessionTokens> {
  const user = await findWithPassword(() => findCredentials(deps, email), password);
  if (!user) throw invalidGrant();
  return deps.outbox.write(caller, (tx, emit) => issuePair(tx, emit, user.id, newId()));
}

interface RefreshRow {
  id: string;
  user_id: string;
  session_id: string;
  revoked: boolean;
  expired: boolean;
}

export async function refreshGrant(deps: ServiceDeps, caller: CallerContext, refreshToken: string): Promise<identity.SessionTokens> {
  const outcome = await deps.outbox.write(caller, async (tx, emit) => {
    // The session is locked first (as a revocation locks it), then the token: concurrent
    // refreshes of one token take turns, and one wins.
    const [known] = await deps.db.rows<{ session_id: string }>(
      sql`select session_id from identity.tokens where token_hash = ${hashToken(refreshToken)} and kind = 'refresh'`,
      tx,
    );
    if (!known) return null;
    await lockSession(tx, known.session_id);
    const [row] = await deps.db.rows<RefreshRow>(
      sql`select id, user_id, session_id, revoked_at is not null as revoked,
                 (expires_at is not null and expires_at <= now()) as expired
          from identity.tokens where token_hash = ${hashToken(refreshToken)} and kind = 'refresh' for update`,
      tx,
    );
    if (!row || row.expired) return null;
    // Rotation and reuse both end the session's live tokens; only rotation issues new ones.
    const ended = await revokeWhere(tx, emit, { session_id: row.session_id });
    if (row.revoked) return null;
    return { ...(await issuePair(tx, emit, row.user_id, row.session_id)), revoked_token_ids: ended.map((t) => t.id) };
  });
  if (!outcome) throw invalidGrant();
  return outcome;
}
