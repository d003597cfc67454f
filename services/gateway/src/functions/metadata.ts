import { SCOPES } from '@lab/identity';
import { json, type Reply } from '../replies.js';
import type { Ctx } from '../request.js';
import { functionsBase } from './oauth.js';

/** Scopes a signed-in user's token needs at the MCP function (its tools only read). */
export const MCP_SCOPES = ['read'];

/** RFC 8414 authorization server metadata; the issuer is the functions base. */
export async function authorizationServerMetadata(ctx: Ctx): Promise<Reply> {
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
    service_documentation: `${ctx.req.protocol}://${ctx.req.get('host') ?? 'localhost'}/v1/openapi.json`,
  });
}

/** RFC 9728 protected resource metadata of the MCP function (named by its 401 challenge). */
export async function protectedResourceMetadata(ctx: Ctx): Promise<Reply> {
  const base = functionsBase(ctx.req);
  return json(200, {
    resource: `${base}/mcp`,
    authorization_servers: [base],
    scopes_supported: MCP_SCOPES,
    bearer_methods_supported: ['header'],
    resource_name: 'Lab notebook MCP tools',
  });
}

export const resourceMetadataUrl = (ctx: Ctx): string => `${functionsBase(ctx.req)}/.well-known/oauth-protected-resource`;
