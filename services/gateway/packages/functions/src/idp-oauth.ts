import type { identity } from '@lab/contracts';
import { json, type Reply } from '@lab/http-api';
import { isAllowedRedirectUri } from '@lab/identity';
import { DomainError, systemContext } from '@lab/kit';
import { bucketKey, RateLimitedError } from '@lab/rate-limits';
import type { FunctionRequest, FunctionsHost } from './host.js';
import { identityProviderIssuer, MCP_SCOPES, mcpResourceUrl } from './metadata.js';
import { authorizeEndpoint, BAD, grantTokens, param, tokenError, tokenParams, type AuthorizeFlow, type Params, type ProofOutcome } from './oauth.js';

/**
 * The identity provider's OAuth endpoints for MCP clients (Claude Desktop, IDEs,
 * the SDK's client): they register themselves (RFC 7591) as public clients, sign
 * the user in with the authorization-code flow and PKCE S256, and get tokens
 * bound to the MCP function (RFC 8707). Separate from the spec's oauth-authorize
 * and oauth-token, which stay for registered confidential clients: a client of one
 * kind is refused at the other's endpoints.
 */
const IDP_BASE = '/auth/v1';
const IDP_OAUTH = `${IDP_BASE}/oauth`;

/**
 * PKCE S256 is required (a public client has no secret; RFC 9700 2.1.1), plain
 * refused. The resource, when sent, must be the MCP function; when left out the
 * grant is bound to it all the same, the only resource a public client may reach.
 */
function requiredPkceAndMcpResource(p: Params, ctx: FunctionRequest): ProofOutcome {
  const challenge = param(p, 'code_challenge');
  const method = param(p, 'code_challenge_method');
  const resource = param(p, 'resource');
  if (challenge === BAD || method === BAD || resource === BAD)
    return { error: 'invalid_request', description: 'a parameter is given more than once or too long' };
  if (challenge === undefined || method !== 'S256')
    return { error: 'invalid_request', description: 'PKCE is required: code_challenge with code_challenge_method=S256' };
  if (!/^[A-Za-z0-9_-]{43}$/.test(challenge)) return { error: 'invalid_request', description: 'an S256 code_challenge is 43 base64url characters' };
  const mcp = mcpResourceUrl(ctx);
  if (resource !== undefined && resource !== mcp) return { error: 'invalid_target', description: `the only resource served is ${mcp}` };
  return { ok: { code_challenge: challenge, code_challenge_method: 'S256', resource: mcp } };
}

const IDP_FLOW: AuthorizeFlow = {
  path: `${IDP_OAUTH}/authorize`,
  flow: 'idp',
  publicClients: true,
  wrongClient: 'This client is a confidential client: it uses the oauth-authorize function with its secret, not the identity provider.',
  issuer: identityProviderIssuer,
  proof: requiredPkceAndMcpResource,
};

/** GET/POST /auth/v1/oauth/authorize: sign-in, organisation choice and consent for public clients. */
export const idpAuthorize = (ctx: FunctionRequest, host: FunctionsHost): Promise<Reply> => authorizeEndpoint(ctx, host, IDP_FLOW);

/**
 * POST /auth/v1/oauth/token: a public client names itself by client_id and proves
 * nothing else (its code by the PKCE verifier). A secret or an Authorization
 * header is refused rather than ignored: such a client belongs at oauth-token.
 */
export async function idpToken(ctx: FunctionRequest, host: FunctionsHost): Promise<Reply> {
  const p = tokenParams(ctx);
  const clientId = param(p, 'client_id');
  const resource = param(p, 'resource');
  if (ctx.req.headers.authorization !== undefined || p.client_secret !== undefined) {
    return tokenError(401, 'invalid_client', 'public clients send no client secret (token_endpoint_auth_method none)');
  }
  if (clientId === undefined || clientId === BAD) return tokenError(400, 'invalid_request', 'client_id is required, once');
  if (resource === BAD) return tokenError(400, 'invalid_request', 'resource is given more than once or too long');
  return grantTokens(ctx, host, p, { client_id: clientId, client_secret: '', public: true }, { challenge: {}, ...(resource ? { resource } : {}) });
}

// ---- dynamic client registration (RFC 7591) ----

/** Registrations per client address; an MCP client registers once per server and install. */
const REGISTER_LIMITS = { per_minute: 10, per_hour: 60 };
const REGISTER_BUCKETS = 2 ** 16;
const MAX_METADATA_BYTES = 16 * 1024;
const MAX_REDIRECT_URIS = 10;
const MAX_NAME = 200;
const GRANT_TYPES = ['authorization_code', 'refresh_token'];

const metadataError = (error: 'invalid_client_metadata' | 'invalid_redirect_uri', description: string): Reply => tokenError(400, error, description);

type Registration = { name: string; redirect_uris: string[]; scopes: string[] } | { reply: Reply };

const stringList = (v: unknown): v is string[] => Array.isArray(v) && v.every((x) => typeof x === 'string');

/**
 * The client metadata of RFC 7591 section 2 that matter here; others (logo_uri,
 * client_uri, contacts, software_id...) are ignored, as section 3.1 allows. Only
 * what this server can honour is accepted: no secret, the code flow, the MCP scopes.
 */
function registration(body: unknown): Registration {
  if (!body || typeof body !== 'object' || Array.isArray(body))
    return { reply: metadataError('invalid_client_metadata', 'send the client metadata as a JSON object') };
  if (Buffer.byteLength(JSON.stringify(body)) > MAX_METADATA_BYTES)
    return { reply: metadataError('invalid_client_metadata', `client metadata is limited to ${MAX_METADATA_BYTES} bytes`) };
  const m = body as Record<string, unknown>;
  const uris = m.redirect_uris;
  if (!stringList(uris) || uris.length < 1 || uris.length > MAX_REDIRECT_URIS) {
    return { reply: metadataError('invalid_redirect_uri', `redirect_uris must list 1 to ${MAX_REDIRECT_URIS} URIs`) };
  }
  // https, or http on the loopback host (RFC 8252 7.3); custom schemes are refused: any app may claim one.
  // No backslash or control character: the URI must read as the host it sends the browser to.
  const bad = uris.filter((u) => u.length > 2000 || !isAllowedRedirectUri(u));
  if (bad.length) {
    return {
      reply: metadataError(
        'invalid_redirect_uri',
        'redirect URIs must be https, or http on localhost or 127.0.0.1, without fragment, backslash or control character',
      ),
    };
  }
  const auth = m.token_endpoint_auth_method;
  if (auth !== undefined && auth !== 'none')
    return { reply: metadataError('invalid_client_metadata', 'only public clients register here: token_endpoint_auth_method must be none') };
  if (m.grant_types !== undefined && (!stringList(m.grant_types) || m.grant_types.some((g) => !GRANT_TYPES.includes(g)))) {
    return { reply: metadataError('invalid_client_metadata', `grant_types may hold ${GRANT_TYPES.join(' and ')}`) };
  }
  if (m.response_types !== undefined && (!stringList(m.response_types) || m.response_types.some((r) => r !== 'code'))) {
    return { reply: metadataError('invalid_client_metadata', 'response_types may hold only code') };
  }
  if (m.scope !== undefined && typeof m.scope !== 'string') return { reply: metadataError('invalid_client_metadata', 'scope is a space-separated string') };
  const scopes = [...new Set((m.scope ?? '').split(' ').filter((s) => s.length > 0))];
  const beyond = scopes.filter((s) => !MCP_SCOPES.includes(s));
  if (beyond.length) return { reply: metadataError('invalid_client_metadata', `MCP clients may ask for: ${MCP_SCOPES.join(' ')}`) };
  const name = m.client_name;
  if (name !== undefined && (typeof name !== 'string' || name.trim().length === 0 || name.length > MAX_NAME)) {
    return { reply: metadataError('invalid_client_metadata', `client_name is 1 to ${MAX_NAME} characters`) };
  }
  return { name: typeof name === 'string' ? name.trim() : 'MCP client', redirect_uris: uris, scopes: scopes.length ? scopes : [...MCP_SCOPES] };
}

/** The registered client, as RFC 7591 section 3.2.1 answers it. */
function registered(c: identity.OAuthClient): Reply {
  return json(
    201,
    {
      client_id: c.client_id,
      client_id_issued_at: Math.floor(Date.parse(c.created_at) / 1000),
      client_name: c.name,
      redirect_uris: c.redirect_uris,
      grant_types: GRANT_TYPES,
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
      scope: c.scopes.join(' '),
    },
    { 'Cache-Control': 'no-store', Pragma: 'no-cache' },
  );
}

/**
 * POST /auth/v1/oauth/register. Open (RFC 7591 allows it; MCP clients cannot be
 * registered by hand), so registrations are counted per client address: each is
 * a row, and the open door must not let anyone add rows without bound. A refused
 * document adds nothing and is not counted.
 */
export async function idpRegister(ctx: FunctionRequest, host: FunctionsHost): Promise<Reply> {
  const r = registration(ctx.body);
  if ('reply' in r) return r.reply;
  try {
    await host.limiter.consume(bucketKey('oauth-register', host.clientAddress(ctx.req), REGISTER_BUCKETS), REGISTER_LIMITS, 'other');
  } catch (err) {
    if (!(err instanceof RateLimitedError)) throw err;
    return tokenError(429, 'temporarily_unavailable', 'too many registrations from this address; retry after 60 seconds', { 'Retry-After': '60' });
  }
  try {
    return registered(await host.clients.identity().call('registerPublicOAuthClient', r, systemContext(ctx.requestId)));
  } catch (err) {
    if (err instanceof DomainError && err.kind === 'invalid') return metadataError('invalid_client_metadata', err.message);
    throw err;
  }
}
