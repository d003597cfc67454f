import type { AdminAction, CalendarOp, ExperimentOp, LabOrderOp, RecordOp, TelemetryAdminOp, TelemetryOp, WebhooksAdminAction } from './operations.js';
import type { RouteScope } from './scopes.js';

/**
 * The route table of the HTTP API, as data. The gateway serves it (routing,
 * authentication, scope and module checks, idempotency, the 404/405 answers)
 * and the OpenAPI document is built from it. Paths use `:name` for parameters.
 */
export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

/**
 * How a route authenticates: `bearer` is the public API (API keys, PATs, OAuth),
 * `session` a signed-in user's access token, `operator` the management token.
 */
type AuthKind = 'none' | 'bearer' | 'session' | 'operator';

export type RouteHandler =
  | { kind: 'health' }
  | { kind: 'ping' }
  | { kind: 'openapi' }
  /**
   * Generic CRUD. `nested` records live under /v1/<parent>/:id/...: `many` are
   * addressed by :sub_id, the `one` record of a parent by the parent alone.
   */
  | { kind: 'record'; op: RecordOp; resource: string; nested?: 'many' | 'one'; testMode?: boolean }
  | { kind: 'audit' }
  /** an organisation's audit hash chain, walked and checked (operator) */
  | { kind: 'audit_verify' }
  | { kind: 'admin'; action: AdminAction }
  | { kind: 'token_grant' }
  | { kind: 'sign_experiment' }
  /** amendments of a signed experiment, its versions and its signature manifest */
  | { kind: 'experiment'; op: ExperimentOp }
  | { kind: 'notifications'; op: 'create' | 'list' | 'update' }
  | { kind: 'jobs'; op: 'create' | 'list' | 'get' | 'artifact' }
  /** server-sent events of job.updated on the realtime channel background_jobs */
  | { kind: 'realtime_jobs' }
  /** functions base: OAuth authorization pages, token endpoint, metadata, MCP */
  | { kind: 'oauth_authorize' }
  | { kind: 'oauth_token' }
  | { kind: 'oauth_metadata'; document: 'authorization_server' | 'protected_resource' | 'identity_provider' }
  /** the identity provider's OAuth endpoints for MCP clients (public clients) */
  | { kind: 'idp_oauth'; op: 'register' | 'authorize' | 'token' }
  | { kind: 'mcp' }
  /** management of outbound subscriptions and inbound endpoints (webhooks service) */
  | { kind: 'webhooks_admin'; action: WebhooksAdminAction }
  /** the inbound receiver: raw body, signature checked by the webhooks service */
  | { kind: 'inbound_webhook' }
  /** devices, results, connectors, environmental points and readings (telemetry service) */
  | { kind: 'telemetry'; op: TelemetryOp }
  | { kind: 'telemetry_admin'; op: TelemetryAdminOp }
  /** multipart raw result file, streamed to the telemetry service (its body is not JSON) */
  | { kind: 'raw_upload' }
  /** lab orders and lab results (orders service) */
  | { kind: 'lab_orders'; op: LabOrderOp }
  /** the outboxes' dead letters, from every service of the deployment */
  | { kind: 'dead_letters'; op: 'list' | 'replay' }
  /** calendar feeds of equipment (equipment service): feed tokens, and the iCalendar feed a token reads */
  | { kind: 'calendar'; op: CalendarOp }
  /** in the contract, served by a service whose RPCs do not exist yet: 503 */
  | { kind: 'pending' };

export interface Route {
  method: HttpMethod;
  path: string;
  auth: AuthKind;
  scope: RouteScope;
  /** organisation module the route needs (403 module_not_enabled otherwise) */
  module?: string;
  /** honours the Idempotency-Key header */
  idempotent: boolean;
  /** gRPC service that serves it (503 service_unavailable when not configured) */
  service?: string;
  handler: RouteHandler;
}

/** Whether `X-Test-Mode: true` makes this route's request a dry run (generic CRUD writes only). */
export function honoursTestMode(h: RouteHandler): h is Extract<RouteHandler, { kind: 'record' }> {
  return h.kind === 'record' && h.testMode === true && h.op !== 'list' && h.op !== 'get';
}

export interface RecordResource {
  resource: string;
  service: string;
  module?: string;
  ops?: RecordOp[];
  /**
   * Whether `X-Test-Mode: true` makes its writes a dry run: only for the spec's
   * generic CRUD resources (experiments, projects, samples, equipment, reagents,
   * stock-items, inventories), not for stock movements, which have their own section.
   */
  testMode: boolean;
}

/** Generic CRUD resources and the service that owns each. */
export const RECORD_RESOURCES: RecordResource[] = [
  { resource: 'experiments', service: 'notebook', testMode: true },
  { resource: 'projects', service: 'notebook', testMode: true },
  { resource: 'samples', service: 'notebook', testMode: true },
  { resource: 'reagents', service: 'inventory', testMode: true },
  { resource: 'stock-items', service: 'inventory', testMode: true },
  { resource: 'inventories', service: 'inventory', testMode: true },
  // movements are created and read, never updated
  { resource: 'stock-movements', service: 'inventory', ops: ['list', 'create', 'get', 'delete'], testMode: false },
  { resource: 'equipment', service: 'equipment', module: 'lab_equipment', testMode: true },
];

const RECORD_ROUTES: Record<RecordOp, { method: HttpMethod; item: boolean }> = {
  list: { method: 'GET', item: false },
  create: { method: 'POST', item: false },
  get: { method: 'GET', item: true },
  update: { method: 'PATCH', item: true },
  replace: { method: 'PUT', item: true },
  delete: { method: 'DELETE', item: true },
};

function recordRoutes(r: RecordResource): Route[] {
  const ops = r.ops ?? (Object.keys(RECORD_ROUTES) as RecordOp[]);
  return ops.map((op) => {
    const { method, item } = RECORD_ROUTES[op];
    return {
      method,
      path: item ? `/v1/${r.resource}/:id` : `/v1/${r.resource}`,
      auth: 'bearer',
      scope: method === 'GET' ? 'read' : 'write',
      module: r.module,
      idempotent: method !== 'GET',
      service: r.service,
      handler: { kind: 'record', op, resource: r.resource, testMode: r.testMode },
    };
  });
}

/** Equipment sub-resources, served as RecordService resources `equipment/<sub>`. */
export const EQUIPMENT_SUBRESOURCES = ['usage', 'maintenance', 'calibrations', 'qualifications'];

const equipmentRoute = (method: HttpMethod, suffix: string, op: RecordOp, sub: string, nested: 'many' | 'one', idempotent: boolean): Route => ({
  method,
  path: `/v1/equipment/:id/${suffix}`,
  auth: 'bearer',
  scope: method === 'GET' ? 'read' : 'write',
  module: 'lab_equipment',
  idempotent,
  service: 'equipment',
  handler: { kind: 'record', op, resource: `equipment/${sub}`, nested },
});

/**
 * Records of a piece of equipment. Idempotency-Key is honoured on the
 * sub-resource POST only; the spec excludes their PATCH/PUT and remote access.
 */
function equipmentSubRoutes(): Route[] {
  const subs = EQUIPMENT_SUBRESOURCES.flatMap((sub) => [
    equipmentRoute('GET', sub, 'list', sub, 'many', false),
    equipmentRoute('POST', sub, 'create', sub, 'many', true),
    equipmentRoute('PATCH', `${sub}/:sub_id`, 'update', sub, 'many', false),
    equipmentRoute('PUT', `${sub}/:sub_id`, 'replace', sub, 'many', false),
  ]);
  const remote = (['get', 'create', 'replace', 'update', 'delete'] as RecordOp[]).map((op) =>
    equipmentRoute(RECORD_ROUTES[op].method, 'remote', op, 'remote', 'one', false),
  );
  return [...subs, ...remote];
}

/**
 * Calendar feeds of equipment (decision 060). Managing one's feed tokens needs
 * the read scope only: a feed reads no more than its creator may. The feed
 * itself takes no Authorization header (calendar clients send none): the token
 * in its path is the credential, checked by the handler, and a bad one is 404.
 */
function calendarRoutes(): Route[] {
  const r = (method: HttpMethod, path: string, op: CalendarOp): Route => ({
    method,
    path,
    auth: 'bearer',
    scope: 'read',
    module: 'lab_equipment',
    idempotent: false,
    service: 'equipment',
    handler: { kind: 'calendar', op },
  });
  return [
    r('POST', '/v1/calendar-feeds', 'create_feed'),
    r('GET', '/v1/calendar-feeds', 'list_feeds'),
    r('DELETE', '/v1/calendar-feeds/:id', 'revoke_feed'),
    {
      method: 'GET',
      path: '/v1/calendar/:feed',
      auth: 'none',
      scope: 'none',
      idempotent: false,
      service: 'equipment',
      handler: { kind: 'calendar', op: 'feed' },
    },
  ];
}

const admin = (method: HttpMethod, path: string, action: AdminAction): Route => ({
  method,
  path: `/admin/v1${path}`,
  auth: 'operator',
  scope: 'none',
  idempotent: false,
  service: 'identity',
  handler: { kind: 'admin', action },
});

/** Every service keeps its own dead letters: no one service serves these routes. */
const deadLetterRoutes = (): Route[] => [
  { method: 'GET', path: '/admin/v1/dead-letters', auth: 'operator', scope: 'none', idempotent: false, handler: { kind: 'dead_letters', op: 'list' } },
  {
    method: 'POST',
    path: '/admin/v1/dead-letters/:id/replay',
    auth: 'operator',
    scope: 'none',
    idempotent: false,
    handler: { kind: 'dead_letters', op: 'replay' },
  },
];

const bearer = (method: HttpMethod, path: string, service: string, handler: RouteHandler, idempotent = false): Route => ({
  method,
  path,
  auth: 'bearer',
  scope: method === 'GET' ? 'read' : 'write',
  idempotent,
  service,
  handler,
});

/** In-app notifications; PATCH (read/unread) is an addition to the spec. */
function notificationRoutes(): Route[] {
  return [
    bearer('POST', '/v1/notifications', 'notifications', { kind: 'notifications', op: 'create' }, true),
    bearer('GET', '/v1/notifications', 'notifications', { kind: 'notifications', op: 'list' }),
    bearer('PATCH', '/v1/notifications/:id', 'notifications', { kind: 'notifications', op: 'update' }),
  ];
}

/** Background jobs; the artifact download is an addition to the spec. */
function jobRoutes(): Route[] {
  return [
    bearer('POST', '/v1/jobs', 'jobs', { kind: 'jobs', op: 'create' }, true),
    bearer('GET', '/v1/jobs', 'jobs', { kind: 'jobs', op: 'list' }),
    bearer('GET', '/v1/jobs/:id', 'jobs', { kind: 'jobs', op: 'get' }),
    bearer('GET', '/v1/jobs/:id/artifact', 'jobs', { kind: 'jobs', op: 'artifact' }),
    // served from the bus by the gateway itself; no service call
    { method: 'GET', path: '/v1/realtime/background_jobs', auth: 'bearer', scope: 'read', idempotent: false, handler: { kind: 'realtime_jobs' } },
  ];
}

const oauthFn = (method: HttpMethod, path: string, handler: RouteHandler, service?: string): Route => ({
  method,
  path,
  auth: 'none',
  scope: 'none',
  idempotent: false,
  ...(service ? { service } : {}),
  handler,
});

/**
 * OAuth and MCP on the functions base. They authenticate themselves: the OAuth
 * endpoints take a client secret or a user's sign-in, and MCP answers 401 with
 * the challenge of the MCP authorization spec, which the pipeline's
 * authentication does not give. The metadata documents are also served at the
 * RFC 8414 / RFC 9728 well-known paths derived from the issuer and the resource.
 */
function oauthFunctionRoutes(): Route[] {
  const asMeta: RouteHandler = { kind: 'oauth_metadata', document: 'authorization_server' };
  const prMeta: RouteHandler = { kind: 'oauth_metadata', document: 'protected_resource' };
  return [
    oauthFn('GET', '/functions/v1/oauth-authorize', { kind: 'oauth_authorize' }, 'identity'),
    oauthFn('POST', '/functions/v1/oauth-authorize', { kind: 'oauth_authorize' }, 'identity'),
    oauthFn('POST', '/functions/v1/oauth-token', { kind: 'oauth_token' }, 'identity'),
    oauthFn('POST', '/functions/v1/mcp', { kind: 'mcp' }, 'identity'),
    oauthFn('GET', '/functions/v1/.well-known/oauth-authorization-server', asMeta),
    oauthFn('GET', '/functions/v1/.well-known/oauth-protected-resource', prMeta),
    oauthFn('GET', '/.well-known/oauth-authorization-server/functions/v1', asMeta),
    oauthFn('GET', '/.well-known/oauth-protected-resource/functions/v1/mcp', prMeta),
  ];
}

/**
 * The identity provider as the authorization server of MCP clients: dynamic
 * registration, authorization (pages) and token endpoint for public clients,
 * and its RFC 8414 metadata at the issuer's well-known path (and under it).
 */
function identityProviderOAuthRoutes(): Route[] {
  const meta: RouteHandler = { kind: 'oauth_metadata', document: 'identity_provider' };
  return [
    oauthFn('POST', '/auth/v1/oauth/register', { kind: 'idp_oauth', op: 'register' }, 'identity'),
    oauthFn('GET', '/auth/v1/oauth/authorize', { kind: 'idp_oauth', op: 'authorize' }, 'identity'),
    oauthFn('POST', '/auth/v1/oauth/authorize', { kind: 'idp_oauth', op: 'authorize' }, 'identity'),
    oauthFn('POST', '/auth/v1/oauth/token', { kind: 'idp_oauth', op: 'token' }, 'identity'),
    oauthFn('GET', '/.well-known/oauth-authorization-server/auth/v1', meta),
    oauthFn('GET', '/auth/v1/.well-known/oauth-authorization-server', meta),
  ];
}

const webhooksAdmin = (method: HttpMethod, path: string, action: WebhooksAdminAction): Route => ({
  method,
  path: `/admin/v1${path}`,
  auth: 'operator',
  scope: 'none',
  idempotent: false,
  service: 'webhooks',
  handler: { kind: 'webhooks_admin', action },
});

/**
 * The inbound webhook receiver on the functions base, in both of the spec's
 * path forms. No bearer token: the request is authenticated by its HMAC
 * signature; Idempotency-Key is honoured by the webhooks service itself
 * (per endpoint, not per token).
 */
const INBOUND_WEBHOOK_PATHS = ['/functions/v1/inbound-webhook/:org_id/:slug', '/functions/v1/inbound-webhook/:slug'];

const inboundWebhookRoutes = (): Route[] =>
  INBOUND_WEBHOOK_PATHS.map((path) => ({
    method: 'POST',
    path,
    auth: 'none',
    scope: 'none',
    idempotent: false,
    service: 'webhooks',
    handler: { kind: 'inbound_webhook' },
  }));

/**
 * Module analytics_qc (telemetry service). Idempotency-Key only on the
 * environmental ingest: the spec excludes connector POST and result ingest.
 * Devices have no GET by id (405), as the spec says.
 */
function telemetryRoutes(): Route[] {
  const r = (method: HttpMethod, path: string, op: TelemetryOp, idempotent = false): Route => ({
    method,
    path,
    auth: 'bearer',
    scope: method === 'GET' ? 'read' : 'write',
    module: 'analytics_qc',
    idempotent,
    service: 'telemetry',
    handler: { kind: 'telemetry', op },
  });
  return [
    r('GET', '/v1/environmental-points', 'listPoints'),
    r('GET', '/v1/environmental-readings', 'listReadings'),
    r('POST', '/v1/environmental-readings', 'ingestReadings', true),
    r('GET', '/v1/devices', 'listDevices'),
    r('POST', '/v1/devices', 'registerDevice'),
    r('DELETE', '/v1/devices/:id', 'deleteDevice'),
    r('GET', '/v1/results', 'listResults'),
    r('POST', '/v1/results', 'ingestResult'),
    r('GET', '/v1/results/:id', 'getResult'),
    r('GET', '/v1/results/:id/chart', 'getResultChart'),
    {
      method: 'POST',
      path: '/v1/results/upload',
      auth: 'bearer',
      scope: 'write',
      module: 'analytics_qc',
      idempotent: false,
      service: 'telemetry',
      handler: { kind: 'raw_upload' },
    },
    r('GET', '/v1/connectors', 'listConnectors'),
    r('POST', '/v1/connectors', 'connectorHeartbeat'),
    r('GET', '/v1/connectors/:id', 'getConnector'),
    r('DELETE', '/v1/connectors/:id', 'deleteConnector'),
  ];
}

const telemetryAdmin = (method: HttpMethod, path: string, op: TelemetryAdminOp): Route => ({
  method,
  path: `/admin/v1${path}`,
  auth: 'operator',
  scope: 'none',
  idempotent: false,
  service: 'telemetry',
  handler: { kind: 'telemetry_admin', op },
});

/** Lab orders with their samples, and their results (orders service, module sample_intake). */
function labOrderRoutes(): Route[] {
  const r = (method: HttpMethod, path: string, op: LabOrderOp): Route => ({
    method,
    path,
    auth: 'bearer',
    scope: method === 'GET' ? 'read' : 'write',
    module: 'sample_intake',
    idempotent: method === 'POST',
    service: 'orders',
    handler: { kind: 'lab_orders', op },
  });
  return [
    r('GET', '/v1/lab-orders', 'list'),
    r('POST', '/v1/lab-orders', 'create'),
    r('GET', '/v1/lab-orders/:id', 'get'),
    // additions to the spec: how results are recorded and released
    r('POST', '/v1/lab-orders/:id/results', 'record_result'),
    r('POST', '/v1/lab-orders/:id/results/:result_id/release', 'release_result'),
    r('GET', '/v1/lab-results', 'list_results'),
  ];
}

export const ROUTES: Route[] = [
  { method: 'GET', path: '/v1/health', auth: 'none', scope: 'none', idempotent: false, handler: { kind: 'health' } },
  { method: 'GET', path: '/v1/openapi.json', auth: 'none', scope: 'none', idempotent: false, handler: { kind: 'openapi' } },
  { method: 'GET', path: '/v1/ping', auth: 'bearer', scope: 'none', idempotent: false, handler: { kind: 'ping' } },
  ...RECORD_RESOURCES.flatMap(recordRoutes),
  // additions to the spec: a signed experiment changes only through an amendment
  bearer('POST', '/v1/experiments/:id/amendments', 'notebook', { kind: 'experiment', op: 'amend' }, true),
  bearer('GET', '/v1/experiments/:id/versions', 'notebook', { kind: 'experiment', op: 'versions' }),
  bearer('GET', '/v1/experiments/:id/signatures', 'notebook', { kind: 'experiment', op: 'signatures' }),
  ...equipmentSubRoutes(),
  ...calendarRoutes(),
  ...labOrderRoutes(),
  ...telemetryRoutes(),
  {
    method: 'GET',
    path: '/v1/audit',
    auth: 'bearer',
    scope: 'audit:read',
    idempotent: false,
    service: 'audit',
    handler: { kind: 'audit' },
  },
  ...notificationRoutes(),
  ...jobRoutes(),

  admin('GET', '/orgs', 'listOrgs'),
  admin('POST', '/orgs', 'createOrg'),
  admin('GET', '/orgs/:org_id', 'getOrg'),
  admin('PATCH', '/orgs/:org_id', 'updateOrg'),
  admin('GET', '/orgs/:org_id/departments', 'listDepartments'),
  admin('POST', '/orgs/:org_id/departments', 'createDepartment'),
  admin('DELETE', '/orgs/:org_id/departments/:id', 'deleteDepartment'),
  admin('GET', '/users', 'listUsers'),
  admin('POST', '/users', 'createUser'),
  admin('GET', '/users/:user_id', 'getUser'),
  admin('GET', '/orgs/:org_id/members', 'listMembers'),
  admin('PUT', '/orgs/:org_id/members/:user_id', 'putMember'),
  admin('DELETE', '/orgs/:org_id/members/:user_id', 'deleteMember'),
  admin('GET', '/orgs/:org_id/api-keys', 'listApiKeys'),
  admin('POST', '/orgs/:org_id/api-keys', 'createApiKey'),
  admin('GET', '/users/:user_id/pats', 'listPats'),
  admin('POST', '/users/:user_id/pats', 'createPat'),
  admin('DELETE', '/tokens/:token_id', 'revokeToken'),
  telemetryAdmin('GET', '/orgs/:org_id/environmental-points', 'adminListPoints'),
  telemetryAdmin('POST', '/orgs/:org_id/environmental-points', 'createPoint'),
  telemetryAdmin('PATCH', '/orgs/:org_id/environmental-points/:point_id', 'updatePoint'),
  telemetryAdmin('DELETE', '/orgs/:org_id/environmental-points/:point_id', 'deletePoint'),
  webhooksAdmin('GET', '/orgs/:org_id/webhook-subscriptions', 'listSubscriptions'),
  webhooksAdmin('POST', '/orgs/:org_id/webhook-subscriptions', 'createSubscription'),
  webhooksAdmin('GET', '/orgs/:org_id/webhook-subscriptions/:id', 'getSubscription'),
  webhooksAdmin('PATCH', '/orgs/:org_id/webhook-subscriptions/:id', 'updateSubscription'),
  webhooksAdmin('DELETE', '/orgs/:org_id/webhook-subscriptions/:id', 'deleteSubscription'),
  webhooksAdmin('POST', '/orgs/:org_id/webhook-subscriptions/:id/rotate-secret', 'rotateSubscriptionSecret'),
  webhooksAdmin('GET', '/orgs/:org_id/webhook-subscriptions/:id/deliveries', 'listDeliveries'),
  webhooksAdmin('POST', '/orgs/:org_id/webhook-subscriptions/:id/deliveries/:delivery_id/redeliver', 'redeliver'),
  webhooksAdmin('GET', '/orgs/:org_id/inbound-endpoints', 'listInboundEndpoints'),
  webhooksAdmin('POST', '/orgs/:org_id/inbound-endpoints', 'createInboundEndpoint'),
  webhooksAdmin('GET', '/orgs/:org_id/inbound-endpoints/:id', 'getInboundEndpoint'),
  webhooksAdmin('PATCH', '/orgs/:org_id/inbound-endpoints/:id', 'updateInboundEndpoint'),
  webhooksAdmin('DELETE', '/orgs/:org_id/inbound-endpoints/:id', 'deleteInboundEndpoint'),
  webhooksAdmin('POST', '/orgs/:org_id/inbound-endpoints/:id/rotate-secret', 'rotateInboundSecret'),
  {
    method: 'GET',
    path: '/admin/v1/orgs/:org_id/audit/verify',
    auth: 'operator',
    scope: 'none',
    idempotent: false,
    service: 'audit',
    handler: { kind: 'audit_verify' },
  },
  ...inboundWebhookRoutes(),
  admin('GET', '/oauth-clients', 'listOAuthClients'),
  admin('POST', '/oauth-clients', 'createOAuthClient'),
  admin('GET', '/oauth-clients/:client_id', 'getOAuthClient'),
  admin('DELETE', '/oauth-clients/:client_id', 'deleteOAuthClient'),
  ...deadLetterRoutes(),
  ...oauthFunctionRoutes(),
  ...identityProviderOAuthRoutes(),

  {
    method: 'POST',
    path: '/auth/v1/token',
    auth: 'none',
    scope: 'none',
    idempotent: false,
    service: 'identity',
    handler: { kind: 'token_grant' },
  },
  {
    method: 'POST',
    path: '/app/v1/experiments/:id/sign',
    auth: 'session',
    scope: 'none',
    idempotent: false,
    service: 'notebook',
    handler: { kind: 'sign_experiment' },
  },
];
