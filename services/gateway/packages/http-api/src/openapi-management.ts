import { MODULES, ROLES } from '@lab/identity';
import { SIGNATURE_SCHEMES } from '@lab/webhooks';
import { nullableOf as nullable, schemaRef as ref, TIME, UUID, type Json } from './openapi-parts.js';

/**
 * The answers of the management API (/admin/v1) as they are written (identity's in
 * libs/contracts/src/identity-json.ts: orgObject, userObject, memberObject,
 * tokenObject, ...; the gateway's handlers/webhooks.ts: subscriptionView, endpointView, deliveries): one
 * schema per view, closed, so a generated client types an organisation, a user
 * or a token field by field.
 */

const closed = (required: string[], properties: Record<string, Json>, description?: string): Json => ({
  type: 'object',
  ...(description ? { description } : {}),
  required,
  properties,
  additionalProperties: false,
});
const readOnlyId = { ...UUID, readOnly: true };
const role = { type: 'string', enum: [...ROLES] };

export const MANAGEMENT_SCHEMAS: Record<string, Json> = {
  Organisation: closed(['id', 'name', 'modules', 'rate_limit'], {
    id: readOnlyId,
    name: { type: 'string' },
    modules: { type: 'array', items: { type: 'string', enum: [...MODULES] }, uniqueItems: true },
    rate_limit: nullable({
      type: 'object',
      description:
        "Each token's requests per minute and per hour (null: the defaults, 120 and 5000). A change applies from the next request, " +
        'and the requests already counted in the current minute and hour count toward the new limits.',
      required: ['per_minute', 'per_hour'],
      properties: { per_minute: { type: 'integer' }, per_hour: { type: 'integer' } },
    }),
    created_at: { ...TIME, readOnly: true, description: 'in reads (not in the answer of a create or update)' },
  }),
  Department: closed(['id', 'org_id', 'name'], { id: readOnlyId, org_id: UUID, name: { type: 'string' }, created_at: { ...TIME, readOnly: true } }),
  Membership: closed(['org_id', 'user_id', 'role', 'department_id'], { org_id: UUID, user_id: UUID, role, department_id: nullable(UUID) }),
  User: closed(['id', 'email', 'name'], {
    id: readOnlyId,
    email: { type: 'string', format: 'email' },
    name: nullable({ type: 'string' }),
    created_at: { ...TIME, readOnly: true },
    memberships: {
      type: 'array',
      description: 'in reads',
      items: closed(['org_id', 'org_name', 'role', 'department_id'], { org_id: UUID, org_name: { type: 'string' }, role, department_id: nullable(UUID) }),
    },
  }),
  Member: closed(['org_id', 'user_id', 'email', 'name', 'role', 'department_id', 'created_at'], {
    org_id: UUID,
    user_id: UUID,
    email: nullable({ type: 'string', format: 'email' }),
    name: nullable({ type: 'string' }),
    role,
    department_id: nullable(UUID),
    created_at: TIME,
  }),
  NewApiKey: closed(['id', 'token', 'scopes', 'user_id'], {
    id: readOnlyId,
    token: { type: 'string', description: 'shown only here' },
    scopes: { type: 'array', items: { type: 'string' } },
    user_id: nullable(UUID),
  }),
  NewPat: closed(['id', 'token', 'scopes', 'org_id'], {
    id: readOnlyId,
    token: { type: 'string', description: 'shown only here' },
    scopes: { type: 'array', items: { type: 'string' } },
    org_id: nullable(UUID),
  }),
  Token: closed(['id', 'name', 'prefix', 'scopes', 'org_id', 'user_id', 'created_at', 'last_used_at', 'expires_at'], {
    id: readOnlyId,
    name: nullable({ type: 'string' }),
    prefix: nullable({ type: 'string' }),
    scopes: { type: 'array', items: { type: 'string' } },
    org_id: nullable(UUID),
    user_id: nullable(UUID),
    connector_id: { ...nullable(UUID), description: 'API keys only' },
    device_ids: { type: 'array', items: UUID, description: 'API keys only' },
    created_at: TIME,
    last_used_at: nullable(TIME),
    expires_at: nullable(TIME),
  }),
  NewOAuthClient: closed(['client_id', 'client_secret'], { client_id: { type: 'string' }, client_secret: { type: 'string', description: 'shown only here' } }),
  OAuthClient: closed(['client_id', 'name', 'redirect_uris', 'scopes', 'created_at', 'public'], {
    client_id: { type: 'string' },
    name: { type: 'string' },
    redirect_uris: { type: 'array', items: { type: 'string', format: 'uri' } },
    scopes: { type: 'array', items: { type: 'string' } },
    created_at: TIME,
    public: { type: 'boolean', description: 'registered by an MCP client itself (no secret)' },
    metadata_url: {
      type: 'string',
      format: 'uri',
      description: 'a public client named by its client ID metadata document: the URL it signs in with as client_id (absent otherwise)',
    },
  }),
};

const eventList = { type: 'array', items: { type: 'string' }, examples: [['sample.created', 'experiment.*']] };
const signatureScheme = { type: 'string', enum: [...SIGNATURE_SCHEMES], description: 'how deliveries are signed' };
Object.assign(MANAGEMENT_SCHEMAS, {
  NewSubscription: closed(['id', 'url', 'events', 'secret', 'active', 'signature_scheme'], {
    id: readOnlyId,
    url: { type: 'string', format: 'uri' },
    events: eventList,
    secret: { type: 'string', description: 'shown only here' },
    active: { type: 'boolean' },
    signature_scheme: signatureScheme,
  }),
  Subscription: closed(['id', 'url', 'events', 'active', 'disabled_reason', 'created_at', 'updated_at', 'previous_secret_expires_at', 'signature_scheme'], {
    id: readOnlyId,
    url: { type: 'string', format: 'uri' },
    events: eventList,
    active: { type: 'boolean' },
    disabled_reason: { ...nullable({ type: 'string' }), description: 'why deliveries stopped by themselves (set with active: false)' },
    created_at: TIME,
    updated_at: TIME,
    previous_secret_expires_at: { ...nullable(TIME), description: 'until then the replaced secret signs too' },
    signature_scheme: signatureScheme,
    secret: {
      type: 'string',
      description: 'only in the answer to a change of signature_scheme the current secret cannot sign with: the new secret, shown only there',
    },
  }),
  SecretRotation: closed(['secret', 'previous_secret_expires_at'], {
    secret: { type: 'string', description: 'shown only here' },
    previous_secret_expires_at: TIME,
  }),
  Delivery: closed(['id', 'event', 'status', 'attempts', 'last_status_code', 'next_attempt_at', 'delivered_at', 'last_error', 'created_at'], {
    id: readOnlyId,
    event: { type: 'string' },
    status: { type: 'string', examples: ['pending', 'delivered', 'failed'] },
    attempts: { type: 'integer', minimum: 0 },
    last_status_code: nullable({ type: 'integer' }),
    next_attempt_at: nullable(TIME),
    delivered_at: nullable(TIME),
    last_error: nullable({ type: 'string' }),
    created_at: TIME,
  }),
  Redelivery: closed(['id', 'status'], { id: UUID, status: { const: 'pending' } }),
  NewInboundEndpoint: closed(['id', 'slug', 'secret', 'url', 'allowed_event_types', 'job_type'], {
    id: readOnlyId,
    slug: { type: 'string' },
    secret: { type: 'string', description: 'shown only here' },
    url: { type: 'string', format: 'uri', description: 'where senders post' },
    allowed_event_types: { type: 'array', items: { type: 'string' } },
    job_type: nullable({ type: 'string' }),
  }),
  InboundEndpoint: closed(['id', 'slug', 'url', 'allowed_event_types', 'job_type', 'active', 'created_at', 'updated_at', 'previous_secret_expires_at'], {
    id: readOnlyId,
    slug: { type: 'string' },
    url: { type: 'string', format: 'uri' },
    allowed_event_types: { type: 'array', items: { type: 'string' } },
    job_type: nullable({ type: 'string' }),
    active: { type: 'boolean' },
    created_at: TIME,
    updated_at: TIME,
    previous_secret_expires_at: nullable(TIME),
  }),
});

Object.assign(MANAGEMENT_SCHEMAS, {
  DeadLetter: closed(['service', 'id', 'type', 'queue', 'error', 'attempts', 'created_at', 'parked_at', 'message'], {
    service: { type: 'string', description: 'whose outbox set it aside' },
    id: UUID,
    type: { type: 'string', description: 'the event or command type' },
    queue: nullable({ type: 'string' }),
    error: nullable({ type: 'string', description: 'why the last attempt failed' }),
    attempts: { type: 'integer', minimum: 0 },
    created_at: TIME,
    parked_at: TIME,
    message: { description: 'the message as it was to be sent' },
  }),
  DeadLetterReplay: closed(['id', 'service', 'replayed'], { id: UUID, service: { type: 'string' }, replayed: { const: true } }),
});

/** The item and list envelopes of the management views (the ones some route answers). */
for (const name of [
  'Organisation',
  'Department',
  'Membership',
  'User',
  'NewApiKey',
  'NewPat',
  'NewOAuthClient',
  'OAuthClient',
  'NewSubscription',
  'Subscription',
  'SecretRotation',
  'Redelivery',
  'NewInboundEndpoint',
  'InboundEndpoint',
  'DeadLetterReplay',
]) {
  MANAGEMENT_SCHEMAS[`${name}Item`] = closed(['data'], { data: ref(name) });
}
for (const name of ['Organisation', 'Department', 'User', 'Member', 'Token', 'OAuthClient', 'Subscription', 'Delivery', 'InboundEndpoint', 'DeadLetter']) {
  MANAGEMENT_SCHEMAS[`${name}List`] = closed(['data', 'pagination'], { data: { type: 'array', items: ref(name) }, pagination: ref('Pagination') });
}

/** The answer schema of each webhook management action that answers a body. */
export const WEBHOOK_ANSWERS: Record<string, string> = {
  createSubscription: 'NewSubscriptionItem',
  listSubscriptions: 'SubscriptionList',
  getSubscription: 'SubscriptionItem',
  updateSubscription: 'SubscriptionItem',
  rotateSubscriptionSecret: 'SecretRotationItem',
  rotateInboundSecret: 'SecretRotationItem',
  listDeliveries: 'DeliveryList',
  redeliver: 'RedeliveryItem',
  createInboundEndpoint: 'NewInboundEndpointItem',
  listInboundEndpoints: 'InboundEndpointList',
  getInboundEndpoint: 'InboundEndpointItem',
  updateInboundEndpoint: 'InboundEndpointItem',
};

/** The answer schema of each management action that answers a body. */
export const MANAGEMENT_ANSWERS: Record<string, string> = {
  createOrg: 'OrganisationItem',
  updateOrg: 'OrganisationItem',
  getOrg: 'OrganisationItem',
  listOrgs: 'OrganisationList',
  createDepartment: 'DepartmentItem',
  listDepartments: 'DepartmentList',
  createUser: 'UserItem',
  getUser: 'UserItem',
  listUsers: 'UserList',
  putMember: 'MembershipItem',
  listMembers: 'MemberList',
  createApiKey: 'NewApiKeyItem',
  createPat: 'NewPatItem',
  listApiKeys: 'TokenList',
  listPats: 'TokenList',
  createOAuthClient: 'NewOAuthClientItem',
  getOAuthClient: 'OAuthClientItem',
  listOAuthClients: 'OAuthClientList',
};
