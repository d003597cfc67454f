/**
 * The functions base, a subsystem the gateway mounts: the spec's oauth-authorize
 * and oauth-token for registered confidential clients, the identity provider's
 * OAuth endpoints for MCP clients (registration, authorization, token), the MCP
 * server, the OAuth metadata documents, and how refusals on those routes read.
 * What it needs of the runtime is declared in host.ts; the runtime
 * authenticates, limits, routes and writes the answers.
 */
export type { FunctionClients, FunctionRequest, FunctionsHost } from './host.js';
export { ClientDocuments, type ClientDocumentOptions } from './client-documents.js';
export { runFunction, type FunctionHandler } from './mount.js';
export { errorReplyOn } from './refusals.js';
export { oauthStateKey, StateSigner } from './signed-state.js';
