import type { Reply, RouteHandler } from '@lab/http-api';
import type { FunctionRequest, FunctionsHost } from './host.js';
import { idpAuthorize, idpRegister, idpToken } from './idp-oauth.js';
import { mcpHandler } from './mcp.js';
import { authorizationServerMetadata, identityProviderMetadata, protectedResourceMetadata } from './metadata.js';
import { oauthAuthorize, oauthToken } from './oauth.js';

/** The route handlers of the route table that the functions base answers. */
export type FunctionHandler = Extract<RouteHandler, { kind: 'oauth_authorize' | 'oauth_token' | 'oauth_metadata' | 'idp_oauth' | 'mcp' }>;

/** Where the runtime mounts the functions: one of their routes, once the runtime has matched it. */
export function runFunction(h: FunctionHandler, request: FunctionRequest, host: FunctionsHost): Promise<Reply> {
  switch (h.kind) {
    case 'oauth_authorize':
      return oauthAuthorize(request, host);
    case 'oauth_token':
      return oauthToken(request, host);
    case 'oauth_metadata':
      return { authorization_server: authorizationServerMetadata, protected_resource: protectedResourceMetadata, identity_provider: identityProviderMetadata }[
        h.document
      ](request);
    case 'idp_oauth':
      return { register: idpRegister, authorize: idpAuthorize, token: idpToken }[h.op](request, host);
    case 'mcp':
      return mcpHandler(request, host);
  }
}
