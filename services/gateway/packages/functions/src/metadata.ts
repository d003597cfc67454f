import { json, type Reply } from '@lab/http-api';
import { SCOPES } from '@lab/identity';
import type { FunctionRequest } from './host.js';
import { functionsBase } from './oauth.js';

/** Scopes a signed-in user's token needs at the MCP function (its tools only read). */
export const MCP_SCOPES = ['read'];

const origin = (ctx: FunctionRequest) => `${ctx.req.protocol}://${ctx.req.get('host') ?? 'localhost'}`;

/** The MCP function's URL: its protected-resource identifier and the audience (RFC 8707) of tokens issued for it. */
export const mcpResourceUrl = (ctx: FunctionRequest): string => `${functionsBase(ctx.req)}/mcp`;

/** The identity provider as an OAuth authorization server for MCP clients (its issuer). */
export const identityProviderIssuer = (ctx: FunctionRequest): string => `${origin(ctx)}/auth/v1`;

/** RFC 8414 authorization server metadata; the issuer is the functions base. */
export async function authorizationServerMetadata(ctx: FunctionRequest): Promise<Reply> {
  const base = functionsBase(ctx.req);
  return json(200, {
    issuer: base,
    authorization_endpoint: `${base}/oauth-authorize`,
    token_endpoint: `${base}/oauth-token`,
    response_types_supported: ['code'],
    response_modes_supported: ['query'],
    grant_types_supported: ['authorization_code', 'refresh_token'],
    token_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post'],
    scopes_supported: [...SCOPES],
    code_challenge_methods_supported: ['S256'],
    // RFC 9207: every authorization response (code or error) carries iss
    authorization_response_iss_parameter_supported: true,
    service_documentation: `${origin(ctx)}/v1/openapi.json`,
  });
}

/**
 * RFC 8414 metadata of the identity provider, the authorization server MCP
 * clients use: client ID metadata documents and dynamic registration of public clients, PKCE S256 only, no client
 * secret, tokens for the MCP function. Served at the RFC 8414 well-known path of
 * its issuer, where the SDK's discovery looks first.
 */
export async function identityProviderMetadata(ctx: FunctionRequest): Promise<Reply> {
  const issuer = identityProviderIssuer(ctx);
  return json(200, {
    issuer,
    authorization_endpoint: `${issuer}/oauth/authorize`,
    token_endpoint: `${issuer}/oauth/token`,
    registration_endpoint: `${issuer}/oauth/register`,
    // a client may name itself by the https URL of its metadata document instead of registering (MCP 2025-11-25)
    client_id_metadata_document_supported: true,
    response_types_supported: ['code'],
    response_modes_supported: ['query'],
    grant_types_supported: ['authorization_code', 'refresh_token'],
    token_endpoint_auth_methods_supported: ['none'],
    scopes_supported: MCP_SCOPES,
    code_challenge_methods_supported: ['S256'],
    authorization_response_iss_parameter_supported: true,
    service_documentation: `${origin(ctx)}/v1/openapi.json`,
  });
}

/**
 * RFC 9728 protected resource metadata of the MCP function (named by its 401
 * challenge). Its authorization server is the identity provider, where MCP
 * clients can register themselves; the spec's confidential-client functions have
 * their own metadata under the functions base.
 */
export async function protectedResourceMetadata(ctx: FunctionRequest): Promise<Reply> {
  return json(200, {
    resource: mcpResourceUrl(ctx),
    authorization_servers: [identityProviderIssuer(ctx)],
    scopes_supported: MCP_SCOPES,
    bearer_methods_supported: ['header'],
    resource_name: 'Lab notebook MCP tools',
  });
}

export const resourceMetadataUrl = (ctx: FunctionRequest): string => `${functionsBase(ctx.req)}/.well-known/oauth-protected-resource`;
