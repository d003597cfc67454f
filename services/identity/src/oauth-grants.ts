import { createHash, timingSafeEqual } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { DomainError, newId, type CallerContext, type Emitter, type ServiceDeps, type Tx, sqlArray } from '@lab/kit';
import type { identity } from '@lab/contracts';
import { findMember } from './members.js';
import { OAUTH_ACCESS_TTL_SECONDS, OAUTH_REFRESH_TTL_SECONDS } from './model.js';
import { authenticateClient, findClient, type ClientAuth } from './oauth-clients.js';
import { scopesForRole } from './scopes.js';
import { insertToken, lockGrant, revokeGrant, revokeWhere } from './token-store.js';
import { hashToken, newAuthorizationCode } from './tokens.js';
import { redirectUriRegistered } from './validation.js';

/**
 * The OAuth grant life cycle. Consent opens a grant (user, organisation, scopes)
 * and issues a single-use code; the code buys one access/refresh pair; each
 * refresh rotates the pair. A code or refresh token presented after it was used
 * is taken as stolen and ends the whole grant. Failures that end a grant are
 * returned out of the transaction (so the revocation commits) and thrown after.
 */
const invalidGrant = (message = 'invalid, expired or already used authorization grant') => new DomainError('invalid', 'invalid_grant', message);
const invalidScope = (message: string) => new DomainError('invalid', 'invalid_scope', message);
/** RFC 8707 section 2: a resource other than the one the grant is bound to. */
const invalidTarget = () => new DomainError('invalid', 'invalid_target', 'resource is not the one this grant was issued for');

const subsetOf = (xs: readonly string[], of: readonly string[]) => xs.every((x) => of.includes(x));

export interface CodeInput {
  client_id: string;
  redirect_uri: string;
  user_id: string;
  org_id: string;
  scopes: string[];
  code_challenge?: string;
  code_challenge_method?: 'S256' | 'plain';
  resource?: string;
}

export async function createOAuthCode(deps: ServiceDeps, caller: CallerContext, input: CodeInput, codeTtlSeconds: number): Promise<identity.OAuthCode> {
  const client = await findClient(deps, input.client_id);
  if (!client || !redirectUriRegistered(client.redirect_uris, input.redirect_uri, client.public))
    throw DomainError.invalid('unknown client or redirect_uri', undefined, 'invalid_client');
  const requested = input.scopes.length ? input.scopes : client.scopes;
  if (!subsetOf(requested, client.scopes)) throw invalidScope(`the client may ask for: ${client.scopes.join(' ')}`);
  // A public client has no secret: its code is only as safe as its PKCE verifier
  // (RFC 9700 2.1.1), and its tokens serve the one resource it asked for.
  if (client.public && (input.code_challenge_method !== 'S256' || !input.code_challenge || !input.resource)) {
    throw DomainError.invalid('a public client needs a code_challenge (S256) and a resource', undefined, 'invalid_request');
  }
  if (!client.public && input.resource) throw DomainError.invalid('resource binding is for public clients', undefined, 'invalid_request');
  const code = newAuthorizationCode();
  const scopes = await deps.outbox.write(caller, async (tx, emit) => {
    // locked: a removal or demotion running now waits for this grant and ends it, or has already ended the membership
    const member = await findMember(deps, input.org_id, input.user_id, tx, true);
    if (!member) throw DomainError.forbidden('not a member of this organisation', 'not_a_member');
    const granted = scopesForRole(requested, member.role);
    if (!granted.length) throw invalidScope('none of the requested scopes can be granted to this member');
    const grantId = newId();
    await tx.execute(sql`insert into identity.oauth_grants (id, client_id, user_id, org_id, scopes, resource)
      values (${grantId}, ${client.id}, ${input.user_id}, ${input.org_id}, ${sqlArray(granted)}::text[], ${input.resource ?? null})`);
    await tx.execute(sql`insert into identity.oauth_codes
        (id, grant_id, code_hash, client_id, redirect_uri, code_challenge, code_challenge_method, expires_at)
      values (${newId()}, ${grantId}, ${hashToken(code)}, ${client.id}, ${input.redirect_uri},
        ${input.code_challenge ?? null}, ${input.code_challenge ? (input.code_challenge_method ?? 'plain') : null},
        now() + ${codeTtlSeconds} * interval '1 second')`);
    emit.audit(input.org_id, {
      action: 'create',
      resource: 'oauth_grant',
      record_id: grantId,
      after: { id: grantId, client_id: client.id, user_id: input.user_id, org_id: input.org_id, scopes: granted, resource: input.resource ?? null },
    });
    return granted;
  });
  return { code, scopes, expires_in: codeTtlSeconds };
}

interface GrantOf {
  grant_id: string;
  user_id: string;
  org_id: string;
  grant_scopes: string[];
  /** RFC 8707 resource of the grant; null for confidential clients' grants */
  resource: string | null;
}

/** A resource named at the token endpoint must be the grant's own (a client may also leave it out). */
const targetMatches = (g: GrantOf, resource: string | undefined) => resource === undefined || resource === g.resource;

/** A new access/refresh pair of a grant; the refresh token keeps the grant's full scopes. */
async function issuePair(tx: Tx, emit: Emitter, g: GrantOf, accessScopes: string[]): Promise<identity.OAuthTokens> {
  const base = { name: null, org_id: g.org_id, user_id: g.user_id, grant_id: g.grant_id };
  const refresh = await insertToken(tx, { ...base, kind: 'oauth_refresh', scopes: g.grant_scopes, ttl_seconds: OAUTH_REFRESH_TTL_SECONDS });
  const access = await insertToken(tx, { ...base, kind: 'oauth', scopes: accessScopes, ttl_seconds: OAUTH_ACCESS_TTL_SECONDS });
  emit.audit(g.org_id, {
    action: 'issue',
    resource: 'oauth_grant',
    record_id: g.grant_id,
    after: { access_token_id: access.id, refresh_token_id: refresh.id, scopes: accessScopes },
  });
  return {
    access_token: access.token,
    expires_in: OAUTH_ACCESS_TTL_SECONDS,
    refresh_token: refresh.token,
    scopes: accessScopes,
    org_id: g.org_id,
    user_id: g.user_id,
    revoked_token_ids: [],
  };
}

type Outcome = { ok: identity.OAuthTokens } | { fail: DomainError };

async function settle(p: Promise<Outcome>): Promise<identity.OAuthTokens> {
  const o = await p;
  if ('fail' in o) throw o.fail;
  return o.ok;
}

/** PKCE (RFC 7636) when the code was issued with a challenge; optional, never instead of the secret. */
function verifierMatches(challenge: string | null, method: string | null, verifier: string | undefined): boolean {
  if (challenge === null) return true;
  if (verifier === undefined) return false;
  const derived = method === 'S256' ? createHash('sha256').update(verifier, 'ascii').digest('base64url') : verifier;
  const a = Buffer.from(derived);
  const b = Buffer.from(challenge);
  return a.length === b.length && timingSafeEqual(a, b);
}

interface CodeRow extends GrantOf {
  client_id: string;
  redirect_uri: string;
  code_challenge: string | null;
  code_challenge_method: string | null;
  used: boolean;
  expired: boolean;
  grant_revoked: boolean;
}

export async function exchangeOAuthCode(
  deps: ServiceDeps,
  caller: CallerContext,
  input: { client: ClientAuth; code: string; redirect_uri: string; code_verifier?: string; resource?: string },
): Promise<identity.OAuthTokens> {
  const client = await authenticateClient(deps, input.client);
  return settle(
    deps.outbox.write<Outcome>(caller, async (tx, emit) => {
      // The row lock makes concurrent redemptions of one code take turns: one wins.
      const [row] = await deps.db.rows<CodeRow>(
        sql`select c.client_id, c.redirect_uri, c.code_challenge, c.code_challenge_method, c.used_at is not null as used,
                   c.expires_at <= now() as expired, g.id as grant_id, g.user_id, g.org_id, g.scopes as grant_scopes,
                   g.resource, g.revoked_at is not null as grant_revoked
            from identity.oauth_codes c join identity.oauth_grants g on g.id = c.grant_id
            where c.code_hash = ${hashToken(input.code)} for update of c`,
        tx,
      );
      if (!row || row.client_id !== client.id) return { fail: invalidGrant() };
      if (row.used) {
        // RFC 6749 4.1.2: a code used twice revokes the tokens issued from it.
        await revokeGrant(tx, emit, row.grant_id);
        return { fail: invalidGrant() };
      }
      if (row.expired || row.grant_revoked) return { fail: invalidGrant() };
      if (row.redirect_uri !== input.redirect_uri) return { fail: invalidGrant('redirect_uri does not match the authorization request') };
      if (!verifierMatches(row.code_challenge, row.code_challenge_method, input.code_verifier)) {
        return { fail: invalidGrant('code_verifier does not match the code challenge') };
      }
      if (!targetMatches(row, input.resource)) return { fail: invalidTarget() };
      await tx.execute(sql`update identity.oauth_codes set used_at = now() where code_hash = ${hashToken(input.code)}`);
      return { ok: await issuePair(tx, emit, row, row.grant_scopes) };
    }),
  );
}

interface RefreshRow extends GrantOf {
  client_id: string;
  revoked: boolean;
  expired: boolean;
  grant_revoked: boolean;
}

export async function refreshOAuthToken(
  deps: ServiceDeps,
  caller: CallerContext,
  input: { client: ClientAuth; refresh_token: string; scopes: string[]; resource?: string },
): Promise<identity.OAuthTokens> {
  const client = await authenticateClient(deps, input.client);
  return settle(
    deps.outbox.write<Outcome>(caller, async (tx, emit) => {
      // the grant first (as a revocation takes it), then the token: see lockGrant
      const [known] = await deps.db.rows<{ grant_id: string }>(
        sql`select grant_id from identity.tokens where token_hash = ${hashToken(input.refresh_token)} and kind = 'oauth_refresh'`,
        tx,
      );
      if (!known) return { fail: invalidGrant() };
      await lockGrant(tx, known.grant_id);
      const [row] = await deps.db.rows<RefreshRow>(
        sql`select g.client_id, t.revoked_at is not null as revoked, t.expires_at <= now() as expired,
                   g.id as grant_id, g.user_id, g.org_id, g.scopes as grant_scopes, g.resource,
                   g.revoked_at is not null as grant_revoked
            from identity.tokens t join identity.oauth_grants g on g.id = t.grant_id
            where t.token_hash = ${hashToken(input.refresh_token)} and t.kind = 'oauth_refresh' for update of t`,
        tx,
      );
      if (!row || row.client_id !== client.id) return { fail: invalidGrant() };
      if (row.revoked) {
        // A rotated refresh token seen again: someone holds a copy. End the grant.
        await revokeGrant(tx, emit, row.grant_id);
        return { fail: invalidGrant() };
      }
      if (row.expired || row.grant_revoked) return { fail: invalidGrant() };
      if (!targetMatches(row, input.resource)) return { fail: invalidTarget() };
      const scopes = input.scopes.length ? input.scopes : row.grant_scopes;
      if (!subsetOf(scopes, row.grant_scopes)) return { fail: invalidScope('a refresh may only narrow the granted scopes') };
      // Rotation: the used refresh token and the grant's earlier access tokens end here.
      const ended = await revokeWhere(tx, emit, { grant_id: row.grant_id });
      return { ok: { ...(await issuePair(tx, emit, row, scopes)), revoked_token_ids: ended.map((t) => t.id) } };
    }),
  );
}
