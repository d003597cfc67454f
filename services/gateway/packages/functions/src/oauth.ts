import type { Request } from 'express';
import type { identity } from '@lab/contracts';
import { causeOf, json, type Reply } from '@lab/http-api';
import { hashToken, redirectUriRegistered, SCOPES, tokenKindOf } from '@lab/identity';
import { DomainError, systemContext } from '@lab/kit';
import { countedSignIn, RateLimitedError } from '@lab/rate-limits';
import type { FunctionRequest, FunctionsHost } from './host.js';
import { cookieOf, CSRF_COOKIE, type AuthorizeRequest, type AuthorizeState } from './signed-state.js';
import { consentPage, errorPage, loginPage, PAGE_HEADERS, type FormSecrets } from './views.js';

/**
 * oauth-authorize and oauth-token: the authorization-code flow for registered
 * confidential clients (RFC 6749 section 4.1, refresh in section 6). Written by
 * hand over identity's RPCs: identity owns clients, grants, codes and tokens and
 * does every check that touches them in one transaction; this module speaks HTTP.
 * The identity provider's endpoints for public (MCP) clients run the same pages
 * and grants with their own rules (see AuthorizeFlow and idp-oauth.ts).
 */
export const functionsBase = (req: Request): string => `${req.protocol}://${req.get('host') ?? 'localhost'}/functions/v1`;

export type Params = Record<string, unknown>;

const MAX_PARAM = 2000;

/** A parameter given at most once (RFC 6749 3.1), as a string; `bad` when repeated or not text. */
export function param(p: Params, name: string): string | undefined | typeof BAD {
  const v = p[name];
  if (v === undefined || v === '') return undefined;
  if (typeof v !== 'string' || v.length > MAX_PARAM) return BAD;
  return v;
}
export const BAD = Symbol('bad');

/** The client's redirect_uri with the response parameters appended. */
function redirectTo(uri: string, values: Record<string, string | undefined>): Reply {
  const u = new URL(uri);
  for (const [k, v] of Object.entries(values)) if (v !== undefined) u.searchParams.append(k, v);
  return { status: 302, headers: { ...PAGE_HEADERS, Location: u.toString() } };
}

/**
 * An error sent back to the client. Like a code, it names the issuer (RFC 9207):
 * a client of several authorization servers then knows which one answered, and a
 * mix-up (an answer of one taken for another's) is caught.
 */
const errorRedirect = (iss: string, r: AuthorizeRequest, error: string, description: string): Reply =>
  redirectTo(r.redirect_uri, { error, error_description: description, state: r.state, iss });

export async function clientOf(host: FunctionsHost, clientId: string, requestId: string): Promise<identity.OAuthClient | null> {
  try {
    return await host.clients.identity().call('getOAuthClient', { client_id: clientId }, systemContext(requestId));
  } catch (err) {
    if (err instanceof DomainError && (err.kind === 'not_found' || err.kind === 'invalid')) return null;
    throw err;
  }
}

type Parsed = { ok: AuthorizeRequest; client: identity.OAuthClient } | { reply: Reply };

/** The PKCE and resource part of an authorization request, or the error to redirect with. */
export type ProofOutcome = { ok: Pick<AuthorizeRequest, 'code_challenge' | 'code_challenge_method' | 'resource'> } | { error: string; description: string };

/**
 * What differs between the spec's oauth-authorize (confidential clients) and the
 * identity provider's authorization endpoint (public clients): the path the pages
 * post back to, the kind of client served, and the PKCE and resource rules.
 */
export interface AuthorizeFlow {
  path: string;
  /** marks the states sealed here; a state is accepted only by the flow that sealed it */
  flow?: 'idp';
  /** true: only public clients are served here; false: only confidential ones */
  publicClients: boolean;
  /** the message of the page shown to a client of the other kind */
  wrongClient: string;
  /** the issuer of this authorization server (its metadata's), sent as `iss` with every authorization response */
  issuer(ctx: FunctionRequest): string;
  proof(p: Params, ctx: FunctionRequest): ProofOutcome;
  /**
   * The client a client_id names at the start of the flow, when this endpoint
   * knows more kinds of client ids than registered ones (the identity provider:
   * metadata document URLs); null for none; a Reply (an error page) to stop.
   */
  client?(ctx: FunctionRequest, host: FunctionsHost, clientId: string): Promise<identity.OAuthClient | null | Reply>;
}

/** The spec's rule: a PKCE challenge (S256 or plain) is checked when sent, never required; no resource binding. */
function optionalPkce(p: Params): ProofOutcome {
  const challenge = param(p, 'code_challenge');
  const method = param(p, 'code_challenge_method');
  if (challenge === BAD || method === BAD || (method !== undefined && (challenge === undefined || (method !== 'S256' && method !== 'plain')))) {
    return { error: 'invalid_request', description: 'code_challenge_method must be S256 or plain and needs a code_challenge' };
  }
  if (challenge !== undefined && !/^[A-Za-z0-9._~-]{43,128}$/.test(challenge)) return { error: 'invalid_request', description: 'malformed code_challenge' };
  return { ok: challenge !== undefined ? { code_challenge: challenge, code_challenge_method: method ?? 'plain' } : {} };
}

const FUNCTIONS_FLOW: AuthorizeFlow = {
  path: '/functions/v1/oauth-authorize',
  publicClients: false,
  wrongClient: 'This client is a public client: it signs users in at the identity provider (/auth/v1/oauth/authorize), not here.',
  issuer: (ctx) => functionsBase(ctx.req),
  proof: optionalPkce,
};

/**
 * The authorization request. Until client_id and redirect_uri are known good
 * every error is a page (a redirect could deliver to an attacker's URI); after
 * that errors go back to the client by redirect, with its state, but only to a
 * client the operator registered. A public client registered itself, with any
 * https URI: redirecting to it before the user has done anything would make this
 * endpoint an open redirector for whoever registers one (RFC 9700 4.11.2), so its
 * errors here are pages too. Once the user has signed in and decided, errors
 * (access_denied...) go back to it as usual.
 */
async function parseAuthorizeRequest(ctx: FunctionRequest, host: FunctionsHost, flow: AuthorizeFlow, p: Params): Promise<Parsed> {
  const clientId = param(p, 'client_id');
  const redirectUri = param(p, 'redirect_uri');
  if (clientId === undefined || clientId === BAD) return { reply: errorPage(400, 'invalid_request', 'client_id is missing or given more than once.') };
  const found = flow.client ? await flow.client(ctx, host, clientId) : await clientOf(host, clientId, ctx.requestId);
  if (found && 'status' in found) return { reply: found };
  const client = found;
  if (!client) return { reply: errorPage(400, 'invalid_client', 'The client is not registered.') };
  if (client.public !== flow.publicClients) return { reply: errorPage(400, 'unauthorized_client', flow.wrongClient) };
  if (redirectUri === undefined || redirectUri === BAD || !redirectUriRegistered(client.redirect_uris, redirectUri, client.public)) {
    return { reply: errorPage(400, 'invalid_request', 'redirect_uri is missing or not registered for this client.') };
  }
  const state = param(p, 'state');
  const base: AuthorizeRequest = {
    // a document client goes on by its URL, which identity knows it by too (and the consent page shows)
    client_id: clientId.startsWith('https://') ? clientId : client.client_id,
    redirect_uri: redirectUri,
    scopes: [],
    ...(typeof state === 'string' ? { state } : {}),
    ...(flow.flow ? { flow: flow.flow } : {}),
  };
  const fail = (error: string, description: string) => ({
    reply: client.public ? errorPage(400, error, description) : errorRedirect(flow.issuer(ctx), base, error, description),
  });
  if (state === BAD) return fail('invalid_request', 'state is given more than once or too long');
  const responseType = param(p, 'response_type');
  if (responseType === undefined || responseType === BAD) return fail('invalid_request', 'response_type is required');
  if (responseType !== 'code') return fail('unsupported_response_type', 'only response_type=code is supported');
  const scope = param(p, 'scope');
  if (scope === BAD) return fail('invalid_request', 'scope is given more than once');
  const scopes = [...new Set((scope ?? '').split(' ').filter((s) => s.length > 0))];
  const unknown = scopes.filter((s) => !(SCOPES as readonly string[]).includes(s) || !client.scopes.includes(s));
  if (unknown.length) return fail('invalid_scope', `not allowed for this client: ${unknown.join(' ')}`);
  const proof = flow.proof(p, ctx);
  if ('error' in proof) return fail(proof.error, proof.description);
  return { ok: { ...base, scopes, ...proof.ok }, client };
}

const secure = (req: Request) => req.protocol === 'https';

function formFor(host: FunctionsHost, req: Request, flow: AuthorizeFlow, r: AuthorizeRequest, userId?: string): FormSecrets {
  const { state, csrf } = host.oauthState.seal(r, userId);
  return { state, csrf, secure: secure(req), action: flow.path };
}

/** The consent page for a signed-in user, or access_denied when they belong to no organisation. */
async function consent(
  ctx: FunctionRequest,
  host: FunctionsHost,
  flow: AuthorizeFlow,
  r: AuthorizeRequest,
  client: identity.OAuthClient,
  userId: string,
): Promise<Reply> {
  const { orgs } = await host.clients.identity().call('listUserOrgs', { user_id: userId }, systemContext(ctx.requestId));
  if (!orgs.length) return errorRedirect(flow.issuer(ctx), r, 'access_denied', 'the user is not a member of any organisation');
  const scopes = r.scopes.length ? r.scopes : client.scopes;
  const publicNotice = { redirectUri: r.redirect_uri, ...(r.client_id.startsWith('https://') ? { documentUrl: r.client_id } : {}) };
  return consentPage(client.name, scopes, orgs, formFor(host, ctx.req, flow, r, userId), client.public ? publicNotice : undefined);
}

/** A user already signed in through /auth/v1/token may present its access token instead of the login form. */
async function sessionUser(ctx: FunctionRequest, host: FunctionsHost): Promise<string | undefined> {
  const m = /^Bearer[ ]+(\S+)\s*$/i.exec(ctx.req.headers.authorization ?? '');
  if (!m || tokenKindOf(m[1]!) !== 'session') return undefined;
  try {
    const u = await host.clients.identity().call('resolveSessionUser', { token_hash: hashToken(m[1]!) }, systemContext(ctx.requestId));
    return u.id;
  } catch (err) {
    if (err instanceof DomainError && err.kind === 'unauthenticated') return undefined;
    throw err;
  }
}

/** GET (and POST without a step) of the authorization endpoint: start of the flow. */
async function start(ctx: FunctionRequest, host: FunctionsHost, flow: AuthorizeFlow, p: Params): Promise<Reply> {
  const parsed = await parseAuthorizeRequest(ctx, host, flow, p);
  if ('reply' in parsed) return parsed.reply;
  const userId = await sessionUser(ctx, host);
  if (userId) return consent(ctx, host, flow, parsed.ok, parsed.client, userId);
  return loginPage(parsed.client.name, formFor(host, ctx.req, flow, parsed.ok));
}

/**
 * The posted state, if it is authentic, unexpired, sealed by this flow (a state
 * of the other endpoint could otherwise skip its rules) and its CSRF token is in
 * both the form and the cookie.
 */
function postedState(ctx: FunctionRequest, host: FunctionsHost, flow: AuthorizeFlow, p: Params): AuthorizeState | Reply {
  const s = host.oauthState.open(p.auth_state);
  if (!s || s.flow !== flow.flow) return errorPage(400, 'invalid_request', 'This sign-in form has expired or was altered. Start again from the application.');
  if (!host.oauthState.csrfValid(s, p.csrf_token, cookieOf(ctx.req.headers.cookie, CSRF_COOKIE))) {
    return errorPage(403, 'invalid_request', 'The form could not be verified (CSRF). Start again from the application.');
  }
  return s;
}

const requestOf = (s: AuthorizeState): AuthorizeRequest => {
  const { user_id: _u, nonce: _n, exp: _e, ...r } = s;
  return r;
};

async function login(ctx: FunctionRequest, host: FunctionsHost, flow: AuthorizeFlow, p: Params): Promise<Reply> {
  const s = postedState(ctx, host, flow, p);
  if (!('nonce' in s)) return s;
  const r = requestOf(s);
  const client = await clientOf(host, r.client_id, ctx.requestId);
  if (!client) return errorPage(400, 'invalid_client', 'The client is no longer registered.');
  const email = param(p, 'email');
  const password = param(p, 'password');
  if (typeof email !== 'string' || typeof password !== 'string') {
    return loginPage(client.name, formFor(host, ctx.req, flow, r), 'Enter your email and password.');
  }
  // Password guessing through the form is throttled per account and address, like a lockout that heals.
  let user: identity.User;
  try {
    user = await countedSignIn(host.limiter, { email, address: host.clientAddress(ctx.req) }, () =>
      host.clients.identity().call('checkCredentials', { email, password }, systemContext(ctx.requestId)),
    );
  } catch (err) {
    if (err instanceof RateLimitedError) return errorPage(429, 'temporarily_unavailable', 'Too many sign-in attempts. Wait a minute and start again.');
    if (err instanceof DomainError && err.kind === 'invalid') return loginPage(client.name, formFor(host, ctx.req, flow, r), 'Invalid email or password.');
    // identity's password checks are all taken (a flood): the form again, not a JSON error
    if (err instanceof DomainError && err.kind === 'unavailable') {
      return loginPage(client.name, formFor(host, ctx.req, flow, r), 'Sign-in is busy right now. Try again in a moment.');
    }
    throw err;
  }
  return consent(ctx, host, flow, r, client, user.id);
}

/**
 * Spends the consent form: one decision per form, on whichever replica it is
 * posted (identity records the state's nonce). Without it the same form and
 * cookie could be posted again for another code, or allow after deny; the
 * signed state alone stays valid for its 10 minutes. A 403 page when spent.
 */
async function spendForm(ctx: FunctionRequest, host: FunctionsHost, s: AuthorizeState): Promise<Reply | undefined> {
  try {
    await host.clients.identity().call('useOAuthForm', { form_id: s.nonce, expires_at: new Date(s.exp * 1000).toISOString() }, systemContext(ctx.requestId));
    return undefined;
  } catch (err) {
    if (err instanceof DomainError && err.code === 'form_used') {
      return errorPage(403, 'invalid_request', 'This consent form has already been used. Start again from the application.');
    }
    throw err;
  }
}

async function decide(ctx: FunctionRequest, host: FunctionsHost, flow: AuthorizeFlow, p: Params): Promise<Reply> {
  const s = postedState(ctx, host, flow, p);
  if (!('nonce' in s)) return s;
  if (!s.user_id) return errorPage(400, 'invalid_request', 'Sign in first.');
  const spent = await spendForm(ctx, host, s);
  if (spent) return spent;
  const r = requestOf(s);
  const iss = flow.issuer(ctx);
  if (p.decision !== 'allow') return errorRedirect(iss, r, 'access_denied', 'the user denied the request');
  const orgId = param(p, 'org_id');
  if (typeof orgId !== 'string') return errorRedirect(iss, r, 'invalid_request', 'no organisation chosen');
  try {
    const code = await host.clients.identity().call(
      'createOAuthCode',
      {
        client_id: r.client_id,
        redirect_uri: r.redirect_uri,
        user_id: s.user_id,
        org_id: orgId,
        scopes: r.scopes,
        code_challenge: r.code_challenge,
        code_challenge_method: r.code_challenge_method,
        resource: r.resource,
      },
      systemContext(ctx.requestId, orgId),
    );
    return redirectTo(r.redirect_uri, { code: code.code, state: r.state, iss });
  } catch (err) {
    if (err instanceof DomainError) {
      if (err.code === 'invalid_scope') return errorRedirect(iss, r, 'invalid_scope', err.message);
      if (err.code === 'invalid_client') return errorRedirect(iss, r, 'unauthorized_client', err.message);
      if (err.kind === 'forbidden' || err.kind === 'invalid')
        return errorRedirect(iss, r, 'access_denied', 'the user cannot grant access to this organisation');
    }
    host.log.error({ err }, 'oauth-authorize failed');
    return errorRedirect(iss, r, 'server_error', 'the authorization server failed; try again');
  }
}

/** GET/POST of an authorization endpoint: the start, the sign-in form, the consent form. */
export async function authorizeEndpoint(ctx: FunctionRequest, host: FunctionsHost, flow: AuthorizeFlow): Promise<Reply> {
  if (ctx.req.method === 'GET' || ctx.req.method === 'HEAD') return start(ctx, host, flow, ctx.req.query);
  const body = (ctx.body && typeof ctx.body === 'object' ? ctx.body : {}) as Params;
  switch (body.step) {
    case 'login':
      return login(ctx, host, flow, body);
    case 'consent':
      return decide(ctx, host, flow, body);
    case undefined:
      return start(ctx, host, flow, body);
    default:
      return errorPage(400, 'invalid_request', 'unknown form step');
  }
}

/** GET/POST /functions/v1/oauth-authorize. */
export const oauthAuthorize = (ctx: FunctionRequest, host: FunctionsHost): Promise<Reply> => authorizeEndpoint(ctx, host, FUNCTIONS_FLOW);

// ---- token endpoint ----

const TOKEN_HEADERS = { 'Cache-Control': 'no-store', Pragma: 'no-cache' };

export const tokenError = (status: number, error: string, description: string, headers: Record<string, string> = {}): Reply =>
  json(status, { error, error_description: description }, { ...TOKEN_HEADERS, ...headers });

const BASIC_CHALLENGE = { 'WWW-Authenticate': 'Basic realm="oauth-token", charset="UTF-8"' };

type ClientCreds = { client_id: string; client_secret: string; basic: boolean };

/** client_secret_basic (RFC 6749 2.3.1: form-urlencoded id and secret) or client_secret_post; never both. */
function clientCredentials(req: Request, p: Params): ClientCreds | Reply {
  const header = req.headers.authorization;
  const postId = param(p, 'client_id');
  const postSecret = param(p, 'client_secret');
  if (postId === BAD || postSecret === BAD) return tokenError(400, 'invalid_request', 'client_id or client_secret given more than once');
  if (header !== undefined) {
    const m = /^Basic[ ]+([A-Za-z0-9+/=]+)\s*$/i.exec(header);
    const decoded = m ? Buffer.from(m[1]!, 'base64').toString('utf8') : '';
    const i = decoded.indexOf(':');
    if (i < 0) return tokenError(401, 'invalid_client', 'malformed Basic credentials', BASIC_CHALLENGE);
    if (postSecret !== undefined) return tokenError(400, 'invalid_request', 'use one client authentication method');
    try {
      const id = decodeURIComponent(decoded.slice(0, i).replace(/\+/g, ' '));
      const secret = decodeURIComponent(decoded.slice(i + 1).replace(/\+/g, ' '));
      if (postId !== undefined && postId !== id) return tokenError(400, 'invalid_request', 'client_id differs from the Basic credentials');
      return { client_id: id, client_secret: secret, basic: true };
    } catch {
      return tokenError(401, 'invalid_client', 'malformed Basic credentials', BASIC_CHALLENGE);
    }
  }
  if (postId === undefined || postSecret === undefined) return tokenError(401, 'invalid_client', 'client authentication is required', BASIC_CHALLENGE);
  return { client_id: postId, client_secret: postSecret, basic: false };
}

/** The form parameters of a token request (a JSON body is taken too; anything else reads as empty). */
export const tokenParams = (ctx: FunctionRequest): Params => (ctx.body && typeof ctx.body === 'object' && !Array.isArray(ctx.body) ? ctx.body : {}) as Params;

/** POST /functions/v1/oauth-token: authorization_code and refresh_token grants. */
export async function oauthToken(ctx: FunctionRequest, host: FunctionsHost): Promise<Reply> {
  const p = tokenParams(ctx);
  const creds = clientCredentials(ctx.req, p);
  if (!('client_id' in creds)) return creds;
  const client = { client_id: creds.client_id, client_secret: creds.client_secret, public: false };
  return grantTokens(ctx, host, p, client, { challenge: creds.basic ? BASIC_CHALLENGE : {} });
}

/**
 * The authorization_code and refresh_token grants of both token endpoints, once
 * the client is named (identity authenticates it). `resource` (RFC 8707) is
 * passed on only by the identity provider's endpoint; `challenge` goes on a 401.
 */
export async function grantTokens(
  ctx: FunctionRequest,
  host: FunctionsHost,
  p: Params,
  client: identity.ClientAuth,
  opts: { challenge: Record<string, string>; resource?: string },
): Promise<Reply> {
  const grantType = param(p, 'grant_type');
  const idc = host.clients.identity();
  const caller = systemContext(ctx.requestId);
  let t: identity.OAuthTokens;
  try {
    if (grantType === 'authorization_code') {
      const code = param(p, 'code');
      const redirectUri = param(p, 'redirect_uri');
      const verifier = param(p, 'code_verifier');
      if (typeof code !== 'string' || typeof redirectUri !== 'string' || verifier === BAD) {
        return tokenError(400, 'invalid_request', 'code and redirect_uri are required, each once');
      }
      t = await idc.call('exchangeOAuthCode', { client, code, redirect_uri: redirectUri, code_verifier: verifier, resource: opts.resource }, caller);
    } else if (grantType === 'refresh_token') {
      const refresh = param(p, 'refresh_token');
      const scope = param(p, 'scope');
      if (typeof refresh !== 'string' || scope === BAD) return tokenError(400, 'invalid_request', 'refresh_token is required, once');
      const scopes = [...new Set((scope ?? '').split(' ').filter((s) => s.length > 0))];
      t = await idc.call('refreshOAuthToken', { client, refresh_token: refresh, scopes, resource: opts.resource }, caller);
    } else if (grantType === undefined || grantType === BAD) {
      return tokenError(400, 'invalid_request', 'grant_type is required, once');
    } else {
      return tokenError(400, 'unsupported_grant_type', 'supported: authorization_code, refresh_token');
    }
  } catch (err) {
    if (!(err instanceof DomainError)) throw err;
    if (err.code === 'invalid_client') return tokenError(401, 'invalid_client', 'client authentication failed', opts.challenge);
    if (err.code === 'invalid_grant' || err.code === 'invalid_scope' || err.code === 'invalid_target') return tokenError(400, err.code, err.message);
    if (err.kind === 'invalid') return tokenError(400, 'invalid_request', err.message);
    if (err.kind === 'unavailable') return { ...tokenError(503, 'temporarily_unavailable', 'try again later'), cause: causeOf(err) };
    throw err;
  }
  // A rotation ended the grant's earlier tokens: this replica stops honouring them now, not when the event arrives.
  host.dropTokens(t.revoked_token_ids);
  return json(
    200,
    { access_token: t.access_token, token_type: 'bearer', expires_in: t.expires_in, refresh_token: t.refresh_token, scope: t.scopes.join(' ') },
    TOKEN_HEADERS,
  );
}
