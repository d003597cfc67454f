import type { identity } from '@lab/contracts';
import { json, type Reply } from '@lab/http-api';
import { DomainError, systemContext } from '@lab/kit';
import { bucketKey, RateLimitedError } from '@lab/rate-limits';
import type { FunctionRequest, FunctionsHost } from './host.js';
import { GRANT_TYPES, metadataError, registration } from './client-metadata.js';
import { identityProviderIssuer, mcpResourceUrl } from './metadata.js';
import { ClientDocumentError, documentUrlProblem } from './client-documents.js';
import { authorizeEndpoint, BAD, clientOf, grantTokens, param, tokenError, tokenParams, type AuthorizeFlow, type Params, type ProofOutcome } from './oauth.js';
import { errorPage } from './views.js';

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

/** Documents fetched per client address (cache misses only): each may add a client row, as a registration does. */
const DOCUMENT_LIMITS = { per_minute: 10, per_hour: 60 };

/**
 * The client of an authorization request: a registered one by its UUID, or one
 * named by its metadata document URL (draft-ietf-oauth-client-id-metadata-document),
 * whose document is read (cached; see ClientDocuments) and whose row in identity is
 * brought up to date with it. A bad URL or document is an error page: nothing is
 * known good to redirect to.
 */
async function idpClient(ctx: FunctionRequest, host: FunctionsHost, clientId: string): Promise<identity.OAuthClient | null | Reply> {
  const problem = documentUrlProblem(clientId);
  if (problem === undefined) return clientOf(host, clientId, ctx.requestId);
  if (problem) return errorPage(400, 'invalid_client', `${problem}.`);
  let doc;
  try {
    doc = await host.clientDocuments.resolve(clientId, async () => {
      await host.limiter.consume(bucketKey('oauth-client-document', host.clientAddress(ctx.req), REGISTER_BUCKETS), DOCUMENT_LIMITS, 'other');
    });
  } catch (err) {
    if (err instanceof RateLimitedError)
      return errorPage(429, 'temporarily_unavailable', 'Too many client documents were fetched for this address. Wait a minute and start again.');
    if (err instanceof ClientDocumentError) return errorPage(400, 'invalid_client', `${err.message}.`);
    throw err;
  }
  try {
    return await host.clients
      .identity()
      .call(
        'registerPublicOAuthClient',
        { name: doc.name, redirect_uris: doc.redirect_uris, scopes: doc.scopes, metadata_url: doc.url },
        systemContext(ctx.requestId),
      );
  } catch (err) {
    if (err instanceof DomainError && err.kind === 'invalid')
      return errorPage(400, 'invalid_client', `The client's metadata document is refused: ${err.message}`);
    throw err;
  }
}

const IDP_FLOW: AuthorizeFlow = {
  path: `${IDP_OAUTH}/authorize`,
  flow: 'idp',
  publicClients: true,
  wrongClient: 'This client is a confidential client: it uses the oauth-authorize function with its secret, not the identity provider.',
  issuer: identityProviderIssuer,
  proof: requiredPkceAndMcpResource,
  client: idpClient,
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
  if ('error' in r) return metadataError(r.error, r.description);
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
