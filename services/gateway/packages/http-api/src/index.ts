/**
 * The HTTP contract the gateway serves, as data: what proto/ and @lab/contracts
 * are to the gRPC services. The route table and the operations its handlers
 * name, the request schemas the gateway validates bodies and queries with, the
 * scopes, the answer shapes of the generic records, the answers' envelopes
 * (item, list, error: replies.ts), and the OpenAPI document built from all of them.
 */
export * from './operations.js';
export * from './routes.js';
export * from './scopes.js';
export { adminPageFields, adminPageQuery, type AdminPage } from './requests/admin-page.js';
export { adminBodies, adminUsersQuery, uuidField } from './requests/admin.js';
export { auditQuery } from './requests/audit.js';
export { deadLettersQuery } from './requests/dead-letters.js';
export { grantBody, signBody } from './requests/user.js';
export { webhooksAdminBodies, webhooksDeliveriesQuery } from './requests/webhooks.js';
export { openApiDocument, type OpenApiOptions } from './openapi.js';
export { jsonSchemaOf } from './openapi-parts.js';
export * from './replies.js';
