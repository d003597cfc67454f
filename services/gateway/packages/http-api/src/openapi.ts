import { z } from 'zod';
import { JOB_TYPES } from '@lab/contracts';
import { INPUTS as JOB_INPUTS } from '@lab/jobs/job-types';
import { notificationSchemas } from '@lab/notifications';
import { connectorSchemas, deviceSchemas, MZML_MAX_BYTES, pointSchemas, RAW_FILE_MAX_BYTES, readingSchemas, resultSchemas } from '@lab/telemetry';
import { adminBodies, adminQueries } from './requests/admin.js';
import { auditQuery } from './requests/audit.js';
import { grantBody, signBody } from './requests/user.js';
import { amendBody, MEANINGS } from '@lab/notebook';
import { webhooksAdminBodies, webhooksDeliveriesQuery } from './requests/webhooks.js';
import { adminPageQuery } from './requests/admin-page.js';
import { WEBHOOK_SIGNATURE_RULES, WEBHOOKS } from './openapi-webhooks.js';
import { CALENDAR_OPS, CALENDAR_SCHEMAS } from './openapi-calendar.js';
import { MANAGEMENT_ANSWERS, MANAGEMENT_SCHEMAS, WEBHOOK_ANSWERS } from './openapi-management.js';
import { TELEMETRY_ANSWERS, TELEMETRY_SCHEMAS } from './openapi-telemetry.js';
import { describeLabOrderOp, LAB_ORDER_SCHEMAS, ORDER_ANSWERS, ORDER_SCHEMAS, typedResultList } from './openapi-orders.js';
import { deadLettersQuery } from './requests/dead-letters.js';
import { RECORD_BODIES as NOTEBOOK_RECORDS } from '@lab/notebook/record-schemas';
import { RECORD_BODIES as INVENTORY_RECORDS } from '@lab/inventory/record-schemas';
import { RECORD_BODIES as EQUIPMENT_RECORDS } from '@lab/equipment/record-schemas';
import { RECORD_ANSWERS } from './record-fields.js';
import type { AdminAction, RecordOp, TelemetryAdminOp, TelemetryOp, WebhooksAdminAction } from './operations.js';
import { honoursTestMode, type HttpMethod, type Route, type RouteHandler } from './routes.js';
import { jsonSchemaOf, nullableOf, UUID, type Json } from './openapi-parts.js';

/**
 * The OpenAPI 3.1 document the gateway serves, derived from the route table and
 * from the zod schemas the gateway's handlers validate with (requests/, and the
 * services' exported ones; z.toJSONSchema), so it cannot drift from what the
 * gateway does. Bodies of generic records are validated by their owning services;
 * their answers are described from the spec's field table (record-fields.ts).
 */

export interface OpenApiOptions {
  /** info.version: the interface revision of the spec */
  version?: string;
  /** server URLs; the default is the request-relative root */
  servers?: { url: string; description?: string }[];
}

const ref = (kind: 'schemas' | 'parameters' | 'headers' | 'responses', name: string) => ({ $ref: `#/components/${kind}/${name}` });

interface RecordDef {
  create: z.ZodType;
  update?: z.ZodType;
  orderBy: string[];
  filters: Record<string, string>;
  /** columns label_prefix matches */
  labels?: string[];
}

/** The schema with null taken out again (a NOT NULL column). */
function withoutNull(s: Json): Json {
  if (!Array.isArray(s.type)) return s;
  const types = s.type.filter((t) => t !== 'null');
  const out: Json = { ...s, type: types.length === 1 ? types[0] : types };
  if (Array.isArray(s.enum)) out.enum = s.enum.filter((v) => v !== null);
  return out;
}

// ---------------------------------------------------------------- components

const SCHEMAS: Record<string, Json> = {
  Error: {
    type: 'object',
    description: 'The error envelope of every route (except the idempotency conflict).',
    required: ['error'],
    properties: {
      error: {
        type: 'object',
        required: ['code', 'message'],
        properties: {
          code: { type: 'string', examples: ['validation_failed', 'insufficient_scope', 'not_found'] },
          message: { type: 'string' },
          details: { type: 'object', description: 'e.g. {fields: [{path, message}]} for validation_failed, {error_id} for a 500' },
        },
      },
    },
  },
  IdempotencyConflict: {
    type: 'object',
    description: 'The one exception to the error envelope: Idempotency-Key reused with a different payload (error is a plain string).',
    required: ['data', 'error', 'meta'],
    properties: {
      data: { type: 'null' },
      error: { type: 'string', const: 'idempotency_key_conflict' },
      meta: { type: 'object', required: ['message'], properties: { message: { type: 'string' } } },
    },
  },
  Pagination: {
    type: 'object',
    required: ['limit', 'offset', 'total'],
    properties: {
      limit: { type: 'integer' },
      offset: { type: 'integer' },
      total: { type: ['integer', 'null'], description: 'null for a list by keyset (since_created_at)' },
      next_cursor: {
        description: 'a list by keyset only: the since_created_at and since_id of the next page; null once the list is read',
        oneOf: [ref('schemas', 'KeysetCursor'), { type: 'null' }],
      },
    },
  },
  KeysetCursor: {
    type: 'object',
    description: 'Where the next page of a list by keyset starts: send both fields as query parameters.',
    required: ['since_created_at', 'since_id'],
    properties: { since_created_at: { type: 'string', format: 'date-time' }, since_id: UUID },
  },
  TestModeEcho: {
    type: 'object',
    description: 'Answer of a generic CRUD write under X-Test-Mode: true; nothing was validated or changed.',
    required: ['data'],
    properties: {
      data: {
        type: 'object',
        required: ['test_mode', 'would_apply'],
        properties: {
          test_mode: { const: true },
          would_apply: {
            type: 'object',
            required: ['operation', 'resource'],
            properties: { operation: { enum: ['create', 'update', 'replace', 'delete'] }, resource: { type: 'string' }, id: UUID, body: { type: 'object' } },
            additionalProperties: false,
          },
        },
        additionalProperties: false,
      },
    },
    additionalProperties: false,
  },
  AuditRecord: {
    type: 'object',
    description: 'One audit record: who did what to which record, with the record before and after and its place in the hash chain',
    required: [
      'id',
      'created_at',
      'occurred_at',
      'service',
      'action',
      'resource',
      'record_id',
      'actor_user_id',
      'actor_token_id',
      'token_kind',
      'changed_fields',
      'before',
      'after',
      'request_id',
      'reason',
      'meaning',
      'seq',
      'prev_hash',
      'hash',
    ],
    properties: {
      id: { ...UUID, readOnly: true },
      created_at: { type: 'string', format: 'date-time' },
      occurred_at: { type: 'string', format: 'date-time' },
      service: { type: 'string' },
      action: { type: 'string', examples: ['create', 'update', 'delete', 'sign'] },
      resource: { type: 'string', examples: ['sample', 'experiment'] },
      record_id: { type: ['string', 'null'] },
      actor_user_id: { type: ['string', 'null'], format: 'uuid' },
      actor_token_id: { type: ['string', 'null'], format: 'uuid' },
      token_kind: { type: ['string', 'null'] },
      changed_fields: { type: ['array', 'null'], items: { type: 'string' } },
      before: { type: ['object', 'null'] },
      after: { type: ['object', 'null'] },
      request_id: { type: ['string', 'null'] },
      reason: { type: ['string', 'null'] },
      meaning: { type: ['string', 'null'] },
      seq: { type: ['integer', 'null'] },
      prev_hash: { type: ['string', 'null'] },
      hash: { type: ['string', 'null'] },
    },
    additionalProperties: false,
  },
  AuditList: {
    type: 'object',
    required: ['data', 'next_cursor', 'count'],
    properties: {
      data: { type: 'array', items: { $ref: '#/components/schemas/AuditRecord' } },
      next_cursor: { oneOf: [{ type: 'null' }, { $ref: '#/components/schemas/KeysetCursor' }] },
      count: { type: 'integer', minimum: 0 },
    },
    additionalProperties: false,
  },
  Notification: {
    type: 'object',
    description: "An in-app notification of the token's user",
    required: ['id', 'notification_type', 'title', 'body', 'link_url', 'entry_id', 'read_at', 'created_at'],
    properties: {
      id: { ...UUID, readOnly: true },
      notification_type: { type: 'string', minLength: 1, maxLength: 64 },
      title: { type: 'string', minLength: 1, maxLength: 200 },
      body: { type: ['string', 'null'], maxLength: 2000 },
      link_url: { type: ['string', 'null'], maxLength: 2000 },
      entry_id: { type: ['string', 'null'], format: 'uuid' },
      read_at: { type: ['string', 'null'], format: 'date-time', description: 'null while unread' },
      created_at: { type: 'string', format: 'date-time', readOnly: true },
    },
    additionalProperties: false,
  },
  NotificationItem: { type: 'object', required: ['data'], properties: { data: { $ref: '#/components/schemas/Notification' } }, additionalProperties: false },
  NotificationList: {
    type: 'object',
    required: ['data', 'count', 'pagination'],
    properties: {
      data: { type: 'array', items: { $ref: '#/components/schemas/Notification' } },
      count: { type: 'integer', minimum: 0 },
      pagination: { $ref: '#/components/schemas/Pagination' },
    },
    additionalProperties: false,
  },
  NotificationsCreated: {
    type: 'object',
    required: ['data'],
    properties: {
      data: {
        type: 'object',
        required: ['created', 'notification_ids'],
        properties: { created: { type: 'integer', minimum: 0 }, notification_ids: { type: 'array', items: UUID } },
        additionalProperties: false,
      },
    },
    additionalProperties: false,
  },
  AuditChainReport: {
    description: "The hash chain of an organisation's audit records checked: sound to its head, or where it breaks",
    oneOf: [
      {
        type: 'object',
        title: 'sound',
        required: ['ok', 'entries', 'head_hash'],
        properties: { ok: { const: true }, entries: { type: 'integer', minimum: 0 }, head_hash: { type: ['string', 'null'] } },
        additionalProperties: false,
      },
      {
        type: 'object',
        title: 'broken',
        required: ['ok', 'entries', 'broken'],
        properties: {
          ok: { const: false },
          entries: { type: 'integer', minimum: 0, description: 'entries found sound before the broken one' },
          broken: {
            type: 'object',
            required: ['seq', 'id', 'problem'],
            properties: {
              seq: { type: 'integer' },
              id: { type: ['string', 'null'], format: 'uuid', description: 'null: past the last entry' },
              problem: { type: 'string', enum: ['hash_mismatch', 'prev_hash_mismatch', 'sequence_gap', 'head_mismatch'] },
              expected_seq: { type: 'integer' },
            },
            additionalProperties: false,
          },
        },
        additionalProperties: false,
      },
    ],
  },
  AuditChainReportItem: {
    type: 'object',
    required: ['data'],
    properties: { data: { $ref: '#/components/schemas/AuditChainReport' } },
    additionalProperties: false,
  },
  Signature: {
    type: 'object',
    description: 'A signature of an experiment version, with whether the content it signed is still the content',
    required: ['id', 'experiment_id', 'meaning', 'signer_id', 'signer_name', 'signed_at', 'content_hash', 'hash_algorithm', 'content_matches'],
    properties: {
      id: { ...UUID, readOnly: true },
      experiment_id: UUID,
      meaning: { type: 'string', enum: [...MEANINGS] },
      signer_id: UUID,
      signer_name: { type: ['string', 'null'] },
      signed_at: { type: 'string', format: 'date-time' },
      content_hash: {
        type: ['string', 'null'],
        pattern: '^[0-9a-f]{64}$',
        description: 'SHA-256 of the signed content; null for signatures made before manifests were kept',
      },
      hash_algorithm: { const: 'sha256' },
      content_matches: { type: ['boolean', 'null'], description: 'null when the signature has no content hash' },
    },
    additionalProperties: false,
  },
  SignatureList: {
    type: 'object',
    required: ['data', 'pagination'],
    properties: { data: { type: 'array', items: { $ref: '#/components/schemas/Signature' } }, pagination: { $ref: '#/components/schemas/Pagination' } },
    additionalProperties: false,
  },
  InboundReceipt: {
    type: 'object',
    description: 'The receipt of an inbound webhook event (not in the data envelope: the sender is a machine of another product).',
    required: ['event_id', 'duplicate'],
    properties: { event_id: UUID, duplicate: { type: 'boolean', description: 'true: this event was received before; nothing new was done' } },
    additionalProperties: false,
  },
  Ping: {
    type: 'object',
    required: ['ok', 'authenticated_as', 'resources', 'docs'],
    properties: {
      ok: { type: 'boolean' },
      authenticated_as: {
        type: 'object',
        properties: { kind: { enum: ['api_key', 'pat', 'oauth'] }, user_id: { type: ['string', 'null'], format: 'uuid' }, org_id: UUID },
      },
      resources: { type: 'array', items: { type: 'string' } },
      docs: { type: 'string', format: 'uri' },
    },
  },
  TokenResponse: {
    type: 'object',
    required: ['access_token', 'token_type', 'expires_in', 'refresh_token'],
    properties: {
      access_token: { type: 'string' },
      token_type: { const: 'bearer' },
      expires_in: { type: 'integer' },
      refresh_token: { type: 'string' },
    },
  },
};

const HEADERS: Record<string, Json> = {
  'X-RateLimit-Limit': {
    description:
      "The limit of the window that binds this token's next request: the organisation's per-minute limit, " +
      'or its per-hour limit when the hour has less left (or none). Requests counted before the limits changed count toward the new ones.',
    schema: { type: 'integer' },
  },
  'X-RateLimit-Remaining': {
    description:
      'Requests left before a 429: what is left of the minute or of the hour, whichever is less (0 once either is spent). ' +
      'A request refused with 429 is not counted.',
    schema: { type: 'integer' },
  },
  'Retry-After': { description: 'Seconds to wait before retrying (60)', schema: { type: 'integer' } },
  Location: { description: 'Where the created record (or the redirect) is', schema: { type: 'string', format: 'uri-reference' } },
  'X-Request-Id': { description: 'Request id, also in the logs; an incoming sane X-Request-Id is kept', schema: { type: 'string' } },
  Warning: { description: 'Set when a cap cut the answer short, e.g. 299 - "lab results capped at 2000 rows"', schema: { type: 'string' } },
  'Idempotent-Replay': { description: '"true" when the answer is replayed from an earlier request with the same Idempotency-Key', schema: { const: 'true' } },
};

const PARAMETERS: Record<string, Json> = {
  IdempotencyKey: {
    name: 'Idempotency-Key',
    in: 'header',
    required: false,
    description: 'Same key and payload within 24 hours replays the first answer (Idempotent-Replay: true); another payload is 409.',
    schema: { type: 'string', minLength: 8, maxLength: 200, pattern: '^[\\x21-\\x7e]+$' },
  },
  TestMode: {
    name: 'X-Test-Mode',
    in: 'header',
    required: false,
    description: 'true: authentication and preliminary write permission are checked, the answer echoes would_apply, nothing changes.',
    schema: { type: 'string', enum: ['true', 'false'] },
  },
  OrgIdHeader: {
    name: 'X-Org-Id',
    in: 'header',
    required: false,
    description: 'Organisation of the request for a personal access token not bound to one (or org_id in the query).',
    schema: UUID,
  },
  OrgIdQuery: {
    name: 'org_id',
    in: 'query',
    required: false,
    description: 'Organisation of the request for a personal access token not bound to one (or the X-Org-Id header).',
    schema: UUID,
  },
};

const SECURITY_SCHEMES: Record<string, Json> = {
  bearer: {
    type: 'http',
    scheme: 'bearer',
    description:
      'API key (bound to one organisation), personal access token (pat_ prefix) or OAuth access token. Scopes: read, write, audit:read, admin, *, devices:register.',
  },
  session: { type: 'http', scheme: 'bearer', description: "A signed-in user's access token from POST /auth/v1/token; send X-Org-Id." },
  operator: { type: 'http', scheme: 'bearer', description: 'The operator token (LAB_OPERATOR_TOKEN) of the management API under /admin/v1.' },
  mcp: {
    type: 'oauth2',
    description:
      'OAuth access tokens for the MCP function (MCP authorization spec): authorization code with PKCE (S256) at the identity provider, public clients registered dynamically (RFC 7591); tokens are bound to the MCP function (resource).',
    flows: {
      authorizationCode: {
        authorizationUrl: '/auth/v1/oauth/authorize',
        tokenUrl: '/auth/v1/oauth/token',
        refreshUrl: '/auth/v1/oauth/token',
        scopes: { read: "read the organisation's records" },
      },
    },
  },
};

// ---------------------------------------------------------------- generic records

/** Each generic resource's create and update schemas, list order and filters, as its owning service declares them. */
const RECORD_DEFS: Record<string, RecordDef> = { ...NOTEBOOK_RECORDS, ...INVENTORY_RECORDS, ...EQUIPMENT_RECORDS };

const pascal = (s: string) => s.replace(/(^|[-_/])([a-z])/g, (_m, _sep, c: string) => c.toUpperCase());
/** Schema name of one record of a resource: Sample, StockItem, EquipmentUsage... */
const recordName = (resource: string) => {
  const p = pascal(resource);
  return p.endsWith('ies') ? `${p.slice(0, -3)}y` : p.endsWith('s') ? p.slice(0, -1) : p;
};

/**
 * A writable field as answered: its body schema without what only a request
 * has (defaults, write-side bounds stay: stored values meet them), null allowed
 * unless the column is NOT NULL.
 */
function answeredField(s: Json, neverNull: boolean): Json {
  const { default: _default, ...rest } = s;
  if (neverNull) return withoutNull(rest);
  return nullableOf(rest);
}

/** Create, update and answer schemas of each generic resource, from its service's zod schemas. */
function recordSchemas(listed: Set<string>): Record<string, Json> {
  const out: Record<string, Json> = {};
  for (const [resource, def] of Object.entries(RECORD_DEFS)) {
    const answer = RECORD_ANSWERS[resource];
    if (!answer) throw new Error(`no answer shape for resource ${resource}`);
    const name = recordName(resource);
    const create = jsonSchemaOf(def.create);
    const update = def.update ? jsonSchemaOf(def.update) : undefined;
    out[`${name}Create`] = { ...create, description: `${answer.title}: create body. Unknown and read-only fields are refused (400).` };
    if (update) out[`${name}Update`] = { ...update, description: `${answer.title}: the writable fields to change.` };
    // a field only an update sets (an inventory's closed_at) is answered too
    const bodyFields = { ...((update?.properties ?? {}) as Record<string, Json>), ...((create.properties ?? {}) as Record<string, Json>) };
    const readOnly = Object.fromEntries(Object.entries(answer.readOnly).map(([k, v]) => [k, { ...v, readOnly: true }]));
    const writable = answer.freeForm
      ? {}
      : Object.fromEntries(
          Object.entries(bodyFields)
            .filter(([k]) => !(k in readOnly))
            .map(([k, v]) => [k, answeredField(v, answer.neverNull.includes(k))]),
        );
    const properties = { ...readOnly, ...writable };
    out[name] = {
      type: 'object',
      description: answer.freeForm ? `${answer.title}: the service's fields and the object's own keys` : answer.title,
      required: Object.keys(answer.freeForm ? readOnly : properties),
      properties,
      additionalProperties: answer.freeForm ? true : false,
    };
    out[`${name}Item`] = { type: 'object', required: ['data'], properties: { data: ref('schemas', name) }, additionalProperties: false };
    if (listed.has(resource))
      out[`${name}List`] = {
        type: 'object',
        required: ['data', 'pagination'],
        properties: { data: { type: 'array', items: ref('schemas', name) }, pagination: ref('schemas', 'Pagination') },
        additionalProperties: false,
      };
  }
  // what signing answers: the experiment with its signature manifest
  const experiment = out.Experiment as { required: string[]; properties: Json } | undefined;
  if (experiment) {
    out.SignedExperiment = {
      ...experiment,
      description: 'Experiment with the signature manifest of this version',
      required: [...experiment.required, 'signatures'],
      properties: { ...experiment.properties, signatures: { type: 'array', items: ref('schemas', 'Signature') } },
    };
    out.SignedExperimentItem = { type: 'object', required: ['data'], properties: { data: ref('schemas', 'SignedExperiment') }, additionalProperties: false };
  }
  return out;
}

const FILTER_SCHEMA: Record<string, Json> = {
  uuid: UUID,
  string: { type: 'string' },
  date: { type: 'string', format: 'date' },
  boolean: { type: 'string', enum: ['true', 'false'] },
};

/** List query of a resource: paging, its allowlisted orders and its equality filters. */
function recordListQuery(resource: string, nested: boolean): Json[] {
  const def = RECORD_DEFS[resource];
  const base = nested ? NESTED_LIST_QUERY : LIST_QUERY;
  if (!def) return base;
  const query = base.map((p) => (p.name === 'order_by' ? { ...p, schema: { type: 'string', enum: def.orderBy } } : p));
  const taken = new Set(query.map((p) => p.name as string));
  for (const [name, type] of Object.entries(def.filters)) {
    if (taken.has(name)) continue;
    query.push({
      name,
      in: 'query',
      required: false,
      description: `only the records whose ${name} equals this`,
      schema: FILTER_SCHEMA[type] ?? { type: 'string' },
    });
  }
  if (def.labels?.length) {
    query.push({
      name: 'label_prefix',
      in: 'query',
      required: false,
      description: `only the records whose ${def.labels.join(' or ')} starts with this, ignoring case (an addition to the spec)`,
      schema: { type: 'string', maxLength: 200 },
    });
  }
  return query;
}

const LIST_QUERY: Json[] = [
  { name: 'limit', in: 'query', schema: { type: 'integer', minimum: 1, maximum: 500, default: 50 } },
  {
    name: 'offset',
    in: 'query',
    description: 'records to skip; 0 (the default) may be sent with keyset paging too',
    schema: { type: 'integer', minimum: 0, default: 0 },
  },
  { name: 'order_by', in: 'query', description: 'an allowlisted column of the resource (created_at always)', schema: { type: 'string' } },
  { name: 'order', in: 'query', schema: { type: 'string', enum: ['asc', 'desc'] } },
  {
    name: 'since_created_at',
    in: 'query',
    description:
      'keyset paging (an addition): the records created at or after this time, oldest first, without a total; with since_id, those after that record (pagination.next_cursor of the page before; its times end in Z, so they need no URL encoding). Not with offset (other than its default, 0), order or order_by. Reading a whole large list this way costs each page what it holds.',
    schema: { type: 'string', format: 'date-time' },
  },
  { name: 'since_id', in: 'query', description: 'with since_created_at: go on after this record', schema: UUID },
];

/** Lists of records under a parent (equipment sub-resources): their own page bounds and a time range. */
const NESTED_LIST_QUERY: Json[] = [
  { name: 'limit', in: 'query', schema: { type: 'integer', minimum: 1, maximum: 500, default: 100 } },
  ...LIST_QUERY.slice(1),
  { name: 'from', in: 'query', description: "inclusive lower bound on the record's own date", schema: { type: 'string', format: 'date-time' } },
  { name: 'to', in: 'query', description: "exclusive upper bound on the record's own date", schema: { type: 'string', format: 'date-time' } },
];

// ---------------------------------------------------------------- operations

const ADMIN_SUCCESS: Record<AdminAction, { status: string; description: string }> = {
  createOrg: { status: '201', description: 'organisation {id, name, modules, rate_limit}' },
  updateOrg: { status: '200', description: 'organisation' },
  createDepartment: { status: '201', description: 'department {id, org_id, name}' },
  createUser: { status: '201', description: 'user {id, email, name}' },
  putMember: {
    status: '200',
    description:
      "membership {org_id, user_id, role, department_id}; a lowered role (one that may do less) revokes the user's OAuth grants in the organisation, with their tokens",
  },
  deleteMember: { status: '204', description: "membership removed, and the user's OAuth grants in the organisation revoked with their tokens" },
  createApiKey: { status: '201', description: 'API key {id, token, scopes, user_id}; the token is shown only here' },
  createPat: { status: '201', description: 'personal access token {id, token, scopes, org_id}; the token is shown only here' },
  revokeToken: { status: '204', description: 'token revoked; it stops working at once' },
  createOAuthClient: { status: '201', description: 'OAuth client {client_id, client_secret}; the secret is shown only here' },
  listOrgs: { status: '200', description: 'organisations {id, name, modules, rate_limit, created_at}, oldest first' },
  getOrg: { status: '200', description: 'organisation {id, name, modules, rate_limit, created_at}' },
  listDepartments: { status: '200', description: 'departments {id, org_id, name, created_at}, oldest first' },
  deleteDepartment: { status: '204', description: 'department deleted; 409 department_in_use while members belong to it or records name it' },
  listUsers: {
    status: '200',
    description: 'users {id, email, name, created_at, memberships: [{org_id, org_name, role, department_id}]}; email= finds one (case-insensitive)',
  },
  getUser: { status: '200', description: 'user {id, email, name, created_at, memberships}' },
  listMembers: { status: '200', description: 'members {org_id, user_id, email, name, role, department_id, created_at}' },
  listApiKeys: {
    status: '200',
    description: 'live API keys {id, name, prefix, scopes, user_id, connector_id, device_ids, created_at, last_used_at}; never the token',
  },
  listPats: { status: '200', description: 'live personal access tokens {id, name, prefix, scopes, org_id, created_at, last_used_at}; never the token' },
  listOAuthClients: {
    status: '200',
    description: 'OAuth clients {client_id, name, redirect_uris, scopes, created_at, public}; never the secret; public: registered by an MCP client itself',
  },
  getOAuthClient: { status: '200', description: 'OAuth client {client_id, name, redirect_uris, scopes, created_at, public}' },
  deleteOAuthClient: { status: '204', description: 'client deleted; every grant made to it is revoked and its tokens stop working' },
};

const RECORD_SUCCESS: Record<RecordOp, { status: string; schema?: string }> = {
  list: { status: '200', schema: 'List' },
  get: { status: '200', schema: 'Item' },
  create: { status: '201', schema: 'Item' },
  update: { status: '200', schema: 'Item' },
  replace: { status: '200', schema: 'Item' },
  delete: { status: '204' },
};

const REASONS: Record<string, string> = {
  '400':
    'Invalid request: validation_failed names each bad field in details.fields; invalid_json a body that is not JSON, ' +
    'or not UTF-8 (details.offset: the first byte, counted in the body once decompressed, that does not begin a UTF-8 character)',
  '401': 'Missing or invalid token',
  '403': 'Insufficient scope (insufficient_scope), module not enabled (module_not_enabled), role or organisation not allowed',
  '404': 'Not found in this organisation',
  '409': 'Conflict',
  '413': 'The request body is over its limit (payload_too_large)',
  '429': 'Rate limit exceeded (or, on the management API, an address that guessed the operator token wrong too often); retry after Retry-After seconds',
  '431': "The request line and headers together are over the HTTP parser's limit (16 KiB; headers_too_large): a long query string counts",
  '503': 'The service behind this route is unavailable or not part of this deployment',
};

interface Op {
  successStatus: string;
  successDescription: string;
  successSchema?: Json;
  body?: Json;
  bodyRequired?: boolean;
  query?: Json[];
  /** of the request body: application/json unless said */
  bodyType?: string;
  /** answers beside the success and the pipeline's errors */
  extraStatuses?: { status: string; description: string; schema?: Json; contentType?: string; headers?: Json }[];
  /** of the success answer: application/json unless said */
  successContentType?: string;
  /** headers of the success answer beside the common ones (Location of a created record) */
  successHeaders?: Json;
  /** more media types of the success answer */
  extraContent?: Json;
  /** OpenAPI links from the success answer to the operations that take its id */
  links?: Json;
  /** the route takes no errors from the generic pipeline list (it states its own) */
  ownErrors?: boolean;
}

type RecordHandler = Extract<Route['handler'], { kind: 'record' }>;

/** The operationId of a route (also the target of links). */
const operationIdOf = (method: string, path: string) => `${method.toLowerCase()}${toOpenApiPath(path).replace(/[^A-Za-z0-9]+/g, '_')}`.replace(/_$/, '');

/**
 * A generic CRUD operation, typed from its resource's schemas. Test mode has its
 * own status where it can (create: 201 real, 200 echo; delete: 204 real, 200 echo);
 * an update's 200 is one of two closed shapes that cannot both match: the record
 * (no test_mode field) or the echo (test_mode: true).
 */
function describeRecordOp(route: Route, h: RecordHandler): Op {
  const s = RECORD_SUCCESS[h.op];
  const name = recordName(h.resource);
  const def = RECORD_DEFS[h.resource];
  const writes = h.op === 'create' || h.op === 'update' || h.op === 'replace';
  const bodyName = h.op === 'create' ? `${name}Create` : `${name}Update`;
  const body = writes ? (def ? okSchema(bodyName) : { type: 'object' }) : undefined;
  const testMode = honoursTestMode(h);
  const success = !s.schema ? undefined : h.op === 'list' ? okSchema(`${name}List`) : okSchema(`${name}Item`);
  const echo = { status: '200', description: 'X-Test-Mode: true: what would apply; nothing changed', schema: okSchema('TestModeEcho') };
  const itemPath = h.nested === 'one' ? route.path : h.nested === 'many' ? `${route.path}/:sub_id` : `${route.path}/:id`;
  const created = h.op === 'create';
  return {
    successStatus: s.status,
    successDescription: h.op === 'delete' ? 'deleted (needs an administrator role)' : `${h.resource}: ${h.op}`,
    successSchema: testMode && success && s.status === '200' ? { oneOf: [success, okSchema('TestModeEcho')] } : success,
    body,
    bodyRequired: h.op === 'create',
    query: h.op === 'list' ? recordListQuery(h.resource, h.nested !== undefined) : undefined,
    extraStatuses: testMode && s.status !== '200' ? [echo] : undefined,
    successHeaders: created ? { Location: ref('headers', 'Location') } : undefined,
    links: created && h.nested !== 'one' ? recordLinks(route, h, itemPath) : undefined,
  };
}

/** From a created record to reading, changing and deleting it. */
function recordLinks(_route: Route, h: RecordHandler, itemPath: string): Json {
  const params: Json = h.nested === 'many' ? { id: '$request.path.id', sub_id: '$response.body#/data/id' } : { id: '$response.body#/data/id' };
  const out: Json = {};
  const targets: [string, string][] = h.nested
    ? [['update', 'PATCH']]
    : [
        ['get', 'GET'],
        ['update', 'PATCH'],
        ['delete', 'DELETE'],
      ];
  for (const [verb, method] of targets) {
    if (!ROUTES_BY_KEY.has(`${method} ${itemPath}`)) continue;
    out[`${verb}${recordName(h.resource)}`] = {
      operationId: operationIdOf(method, itemPath),
      parameters: params,
      description: `the ${recordName(h.resource)} just created`,
    };
  }
  return out;
}

/**
 * The creates beyond the generic record ones: each answers the Location of what
 * it made (its handler sets it) and links to the operation that reads it. `id`
 * names the field of the answer's data that holds the new id (default `id`).
 */
const CREATES: Record<string, { item: string; id?: string }> = {
  'POST /admin/v1/orgs': { item: '/admin/v1/orgs/:org_id' },
  'POST /admin/v1/users': { item: '/admin/v1/users/:user_id' },
  'POST /admin/v1/oauth-clients': { item: '/admin/v1/oauth-clients/:client_id', id: 'client_id' },
  'POST /admin/v1/orgs/:org_id/webhook-subscriptions': { item: '/admin/v1/orgs/:org_id/webhook-subscriptions/:id' },
  'POST /admin/v1/orgs/:org_id/inbound-endpoints': { item: '/admin/v1/orgs/:org_id/inbound-endpoints/:id' },
  'POST /v1/lab-orders': { item: '/v1/lab-orders/:id' },
  'POST /v1/experiments/:id/amendments': { item: '/v1/experiments/:id' },
  'POST /v1/jobs': { item: '/v1/jobs/:id' },
  'POST /v1/results': { item: '/v1/results/:id' },
  // a heartbeat that registers the connector (201; 200 for one already known)
  'POST /v1/connectors': { item: '/v1/connectors/:id' },
};

/** Location and the link to the item operation of a create listed in CREATES, on its 201 (or 202) answer. */
function markCreated(route: Route, responses: Record<string, Json>): void {
  const made = CREATES[`${route.method} ${route.path}`];
  const answer = responses['201'] ?? responses['202'];
  if (!made || !answer) return;
  const names = [...made.item.matchAll(/:([a-z_A-Z]+)/g)].map((m) => m[1]!);
  const parameters: Json = {};
  names.forEach((name, i) => {
    parameters[name] = i === names.length - 1 ? `$response.body#/data/${made.id ?? 'id'}` : `$request.path.${name}`;
  });
  answer.headers = { ...(answer.headers as Json), Location: ref('headers', 'Location') };
  answer.links = { ...(answer.links as Json), get: { operationId: operationIdOf('GET', made.item), parameters, description: 'what was just created' } };
}

/** RFC 6749 5.2 / RFC 7591 3.2.2 error body of the identity provider's OAuth endpoints. */
const OAUTH_ERROR: Json = { type: 'object', required: ['error'], properties: { error: { type: 'string' }, error_description: { type: 'string' } } };
const oauthError = (status: string, description: string) => ({ status, description, schema: OAUTH_ERROR });

const HTML = 'text/html';
const page = (status: string, description: string) => ({ status, description, schema: { type: 'string' }, contentType: HTML });
const redirect = (description: string) => ({ status: '302', description, headers: { Location: ref('headers', 'Location') } });

/** An authorization endpoint: HTML pages, errors as pages or redirects. */
const OAUTH_AUTHORIZE_PAGES: Op = {
  successStatus: '200',
  successDescription:
    'HTML sign-in and consent pages; an error before client_id and redirect_uri are known good is a page (400), after that a 302 to redirect_uri with error, state and iss (RFC 9207). ' +
    'A consent form is single use: posted again (allow or deny, to any replica) it is a 403 page.',
  successContentType: HTML,
  successSchema: { type: 'string' },
  bodyType: 'application/x-www-form-urlencoded',
  body: { type: 'object', additionalProperties: { type: 'string' } },
  ownErrors: true,
  extraStatuses: [
    redirect('to redirect_uri with code, state and iss, or with error, error_description, state and iss (iss: the issuer, RFC 9207)'),
    page('400', 'an invalid request the page explains (unknown client, redirect_uri not registered)'),
    page('401', 'the sign-in page again: wrong email or password'),
    page('403', 'the page of a refused request (a stale form, a consent form already used, a user of no organisation)'),
    page('429', 'too many sign-in attempts from this address (see the token endpoint)'),
    page('413', 'the form is over its limit (64 KB)'),
    page('503', 'the identity service is unavailable'),
  ],
};

/** The identity provider's OAuth endpoints for MCP clients (public clients, PKCE S256, tokens bound to the MCP function). */
/** RFC 6749 5.1: the token answer of both token endpoints. */
const OAUTH_TOKEN_ANSWER: Json = {
  type: 'object',
  required: ['access_token', 'token_type', 'expires_in'],
  properties: {
    access_token: { type: 'string' },
    token_type: { type: 'string', enum: ['bearer', 'Bearer'] },
    expires_in: { type: 'integer' },
    refresh_token: { type: 'string' },
    scope: { type: 'string' },
  },
};

/** RFC 7591 3.2.1: the client information answer of a registration (a public client: no secret). */
const REGISTERED_CLIENT: Json = {
  type: 'object',
  required: ['client_id', 'client_id_issued_at', 'redirect_uris', 'grant_types', 'response_types', 'token_endpoint_auth_method'],
  properties: {
    client_id: { type: 'string' },
    client_id_issued_at: { type: 'integer', description: 'seconds since the epoch' },
    client_name: { type: 'string' },
    redirect_uris: { type: 'array', items: { type: 'string', format: 'uri' } },
    grant_types: { type: 'array', items: { enum: ['authorization_code', 'refresh_token'] } },
    response_types: { type: 'array', items: { const: 'code' } },
    token_endpoint_auth_method: { const: 'none' },
    scope: { type: 'string' },
  },
};

/** JSON-RPC 2.0 section 5: a response holds a result or an error, never both. */
const JSON_RPC_RESPONSE: Json = {
  type: 'object',
  description: 'a JSON-RPC 2.0 response',
  required: ['jsonrpc', 'id'],
  properties: {
    jsonrpc: { const: '2.0' },
    id: { type: ['string', 'integer', 'null'] },
    result: { type: 'object', description: 'the MCP result of the method (initialize, tools/list, tools/call, ...)', additionalProperties: true },
    error: {
      type: 'object',
      required: ['code', 'message'],
      properties: { code: { type: 'integer' }, message: { type: 'string' }, data: {} },
    },
  },
  oneOf: [{ required: ['result'] }, { required: ['error'] }],
};

const IDP_OAUTH_OPS: Record<'register' | 'authorize' | 'token', Op> = {
  register: {
    successStatus: '201',
    successDescription:
      'RFC 7591 dynamic registration of a public client: {client_id, client_id_issued_at, client_name, redirect_uris, grant_types, response_types, token_endpoint_auth_method: none, scope}. ' +
      'redirect_uris: https, or http on localhost/127.0.0.1, without fragment, backslash or control character; answered (and matched) as parsed and normalised ' +
      '(host lowercased, default port and dot segments removed); scope: read; 10 a minute and 60 an hour per client address (429)',
    successSchema: REGISTERED_CLIENT,
    body: {
      type: 'object',
      required: ['redirect_uris'],
      properties: {
        redirect_uris: { type: 'array', items: { type: 'string', format: 'uri' }, minItems: 1, maxItems: 10 },
        client_name: { type: 'string', maxLength: 200 },
        token_endpoint_auth_method: { enum: ['none'] },
        grant_types: { type: 'array', items: { enum: ['authorization_code', 'refresh_token'] } },
        response_types: { type: 'array', items: { enum: ['code'] } },
        scope: { type: 'string' },
      },
    },
    bodyRequired: true,
    extraStatuses: [
      oauthError('400', 'invalid_redirect_uri or invalid_client_metadata; invalid_request for a body that is not JSON'),
      oauthError('413', 'invalid_request: the body is over its limit (1 MB)'),
      { ...oauthError('429', 'temporarily_unavailable: too many registrations from this address'), headers: { 'Retry-After': ref('headers', 'Retry-After') } },
    ],
  },
  // the same pages as the functions base's authorization endpoint, posting back to their own path
  authorize: {
    ...OAUTH_AUTHORIZE_PAGES,
    successDescription:
      'HTML sign-in and consent pages (organisation chosen at consent), then a 302 to redirect_uri with code, state and iss (RFC 9207). ' +
      'Query: response_type=code, client_id, redirect_uri, code_challenge and code_challenge_method=S256 (required), state, scope (read), resource (the MCP function URL). ' +
      'The clients here registered themselves, so an invalid request is a 400 page, never a redirect (RFC 9700 4.11.2); only once the user has signed in and decided ' +
      'do errors (access_denied...) go back to redirect_uri with error, state and iss. A consent form is single use: posted again it is a 403 page. ' +
      "POST: the pages' forms (application/x-www-form-urlencoded).",
  },
  token: {
    successStatus: '200',
    successDescription:
      'authorization_code (code, redirect_uri, code_verifier, client_id) or refresh_token (refresh_token, client_id; rotates): ' +
      '{access_token, token_type, expires_in, refresh_token, scope}; no client secret. The access token is accepted only by the MCP function.',
    successSchema: OAUTH_TOKEN_ANSWER,
    bodyType: 'application/x-www-form-urlencoded',
    body: {
      type: 'object',
      required: ['grant_type', 'client_id'],
      properties: {
        grant_type: { enum: ['authorization_code', 'refresh_token'] },
        client_id: { type: 'string' },
        code: { type: 'string' },
        redirect_uri: { type: 'string' },
        code_verifier: { type: 'string' },
        refresh_token: { type: 'string' },
        resource: { type: 'string', format: 'uri' },
        scope: { type: 'string' },
      },
    },
    bodyRequired: true,
    extraStatuses: [
      oauthError(
        '400',
        "invalid_request, invalid_grant (also a grant ended by the user's removal from the organisation or a lowered role), invalid_scope or invalid_target",
      ),
      oauthError('413', 'invalid_request: the body is over its limit'),
      oauthError('401', 'invalid_client'),
      oauthError('503', 'temporarily_unavailable'),
    ],
  },
};

const okSchema = (name: string) => ref('schemas', name);
/** The job.updated events of the realtime channel background_jobs, as server-sent events. */
const REALTIME_JOBS: Op = {
  successStatus: '200',
  successDescription:
    'A stream of server-sent events that stays open: `event: job.updated` with `data:` the job as JSON ({id, job_type, status, ...}) for each change of a job of the organisation; comment lines keep it alive.',
  successContentType: 'text/event-stream',
  successSchema: { type: 'string', description: 'text/event-stream frames' },
};

/** The functions base's authorization endpoint. */
const OAUTH_AUTHORIZE: Op = OAUTH_AUTHORIZE_PAGES;

/** RFC 6749 5.2 error body of the token endpoints. */
const OAUTH_TOKEN_ERROR: Json = {
  type: 'object',
  required: ['error'],
  properties: {
    error: {
      type: 'string',
      enum: [
        'invalid_request',
        'invalid_client',
        'invalid_grant',
        'unauthorized_client',
        'unsupported_grant_type',
        'invalid_scope',
        'invalid_target',
        'temporarily_unavailable',
        'slow_down',
      ],
    },
    error_description: { type: 'string' },
  },
};
const tokenError = (status: string, description: string) => ({ status, description, schema: OAUTH_TOKEN_ERROR });

/** The functions base's token endpoint (confidential clients: client secret by Basic or form). */
const OAUTH_TOKEN: Op = {
  successStatus: '200',
  successDescription: 'RFC 6749 token answer',
  successSchema: OAUTH_TOKEN_ANSWER,
  bodyType: 'application/x-www-form-urlencoded',
  body: {
    type: 'object',
    required: ['grant_type'],
    properties: {
      grant_type: { type: 'string', enum: ['authorization_code', 'refresh_token', 'client_credentials'] },
      code: { type: 'string' },
      redirect_uri: { type: 'string', format: 'uri' },
      code_verifier: { type: 'string' },
      refresh_token: { type: 'string' },
      client_id: { type: 'string' },
      client_secret: { type: 'string', writeOnly: true },
      scope: { type: 'string' },
      resource: { type: 'string', format: 'uri' },
    },
  },
  bodyRequired: true,
  ownErrors: true,
  extraStatuses: [
    tokenError(
      '400',
      "invalid_request, invalid_grant (also a grant ended by the user's removal from the organisation or a lowered role), unsupported_grant_type, invalid_scope or invalid_target",
    ),
    { ...tokenError('401', 'invalid_client (with WWW-Authenticate: Basic)'), headers: { 'WWW-Authenticate': { schema: { type: 'string' } } } },
    tokenError('413', 'invalid_request: the body is over its limit'),
    tokenError('503', 'temporarily_unavailable'),
  ],
};

const OAUTH_METADATA: Json = {
  type: 'object',
  description: 'RFC 8414 authorization server metadata or RFC 9728 protected resource metadata',
  properties: {
    issuer: { type: 'string', format: 'uri' },
    resource: { type: 'string', format: 'uri' },
    authorization_endpoint: { type: 'string', format: 'uri' },
    token_endpoint: { type: 'string', format: 'uri' },
    registration_endpoint: { type: 'string', format: 'uri' },
    client_id_metadata_document_supported: {
      type: 'boolean',
      description: 'true at the identity provider: a client_id may be the https URL of its client ID metadata document',
    },
    authorization_servers: { type: 'array', items: { type: 'string', format: 'uri' } },
    scopes_supported: { type: 'array', items: { type: 'string' } },
    authorization_response_iss_parameter_supported: {
      type: 'boolean',
      description: 'RFC 9207: true; every authorization response (code or error) carries iss, the issuer',
    },
  },
};

/** MCP (streamable HTTP, JSON-RPC 2.0) with the OAuth access tokens of the MCP authorization spec. */
const MCP: Op = {
  successStatus: '200',
  successDescription: 'the JSON-RPC answer (application/json) or a stream of them (text/event-stream)',
  successSchema: JSON_RPC_RESPONSE,
  body: {
    type: 'object',
    required: ['jsonrpc'],
    properties: { jsonrpc: { const: '2.0' }, id: { type: ['string', 'integer'] }, method: { type: 'string' }, params: { type: 'object' } },
  },
  bodyRequired: true,
  ownErrors: true,
  extraStatuses: [
    { status: '202', description: 'a notification or response was accepted (no body)' },
    {
      status: '401',
      description: 'no or a bad access token: WWW-Authenticate names the protected resource metadata (resource_metadata=...)',
      headers: { 'WWW-Authenticate': { schema: { type: 'string' } } },
      schema: okSchema('Error'),
    },
    { status: '400', description: 'not a JSON-RPC request', schema: { type: 'object' } },
    { status: '413', description: 'the body is over its limit (1 MB; payload_too_large)', schema: okSchema('Error') },
    { status: '403', description: 'the token lacks the scope', schema: okSchema('Error') },
    { status: '503', description: 'unavailable', schema: okSchema('Error') },
  ],
};

/** The inbound webhook receiver: authenticated by its HMAC signature. */
const INBOUND_WEBHOOK: Op = {
  successStatus: '202',
  successDescription: 'the event is received (a replayed Idempotency-Key answers the first receipt again)',
  successSchema: { $ref: '#/components/schemas/InboundReceipt' },
  body: { type: 'object', description: "the sender's event (any JSON object)" },
  bodyRequired: true,
  extraStatuses: [
    {
      status: '200',
      description: 'a repeated delivery (same Idempotency-Key or external id): already received',
      schema: { $ref: '#/components/schemas/InboundReceipt' },
    },
    {
      status: '401',
      description: 'the signature is missing its match or stale (invalid_signature); checked before the body is read as JSON',
      schema: okSchema('Error'),
    },
  ],
};

const jobCreateName = (t: string) => `JobCreate${pascal(t)}`;
/** One create body per job type, its input typed as the jobs service validates it. */
const JOB_CREATE_SCHEMAS: Record<string, Json> = Object.fromEntries(
  JOB_TYPES.map((t) => {
    const input = jsonSchemaOf(JOB_INPUTS[t]);
    const inputRequired = Array.isArray(input.required) && input.required.length > 0;
    return [
      jobCreateName(t),
      {
        type: 'object',
        required: inputRequired ? ['job_type', 'input'] : ['job_type'],
        properties: { job_type: { type: 'string', const: t }, input: inputRequired ? input : { ...input, description: 'may be left out ({})' } },
        additionalProperties: false,
      },
    ];
  }),
);
const JOB_CREATE: Json = {
  oneOf: JOB_TYPES.map((t) => ref('schemas', jobCreateName(t))),
  discriminator: { propertyName: 'job_type', mapping: Object.fromEntries(JOB_TYPES.map((t) => [t, `#/components/schemas/${jobCreateName(t)}`])) },
};
const BINARY: Json = { type: 'string', contentMediaType: 'application/octet-stream' };

const CREATED_RECORD = {
  type: 'object',
  required: ['source', 'id'],
  properties: {
    source: { type: 'string', description: "the dataset's @id in the archive" },
    id: { type: 'string', format: 'uuid' },
    display_id: { type: 'string' },
  },
};
/** The artifact of an eln_import job: what it created (docs/eln.md). */
const ELN_IMPORT_REPORT = {
  type: 'object',
  description: 'the report of an eln_import job',
  required: ['job_id', 'archive_root', 'created', 'entities_kept_as_metadata'],
  properties: {
    job_id: { type: 'string', format: 'uuid' },
    archive_root: { type: 'string' },
    filename: { type: 'string' },
    created: {
      type: 'object',
      required: ['project', 'samples', 'experiments'],
      properties: {
        project: { oneOf: [CREATED_RECORD, { type: 'null' }] },
        samples: { type: 'array', items: CREATED_RECORD },
        experiments: { type: 'array', items: CREATED_RECORD },
      },
    },
    entities_kept_as_metadata: { type: 'integer' },
  },
};
/** The Job of the spec as the jobs service renders it (exactly these fields; inbound ones for a job of a webhook event). */
const JOB_SCHEMAS: Record<string, Json> = {
  Job: {
    type: 'object',
    required: [
      'id',
      'job_type',
      'status',
      'progress',
      'status_text',
      'result_path',
      'result_meta',
      'error_message',
      'attempts',
      'max_attempts',
      'enqueued_at',
      'started_at',
      'finished_at',
    ],
    properties: {
      id: { ...UUID, readOnly: true },
      job_type: { type: 'string', enum: [...JOB_TYPES] },
      status: { type: 'string', enum: ['queued', 'running', 'succeeded', 'failed', 'dead'] },
      progress: { type: 'integer', minimum: 0, maximum: 100 },
      status_text: nullableOf({ type: 'string' }),
      result_path: { ...nullableOf({ type: 'string' }), description: 'set once the job succeeded: fetch the file at GET /v1/jobs/{id}/artifact' },
      result_meta: {
        ...nullableOf({ type: 'object' }),
        description: 'the artifact: {size, sha256, content_type, pages?, rows?, files?}',
        properties: {
          size: { type: 'integer' },
          sha256: { type: 'string' },
          content_type: { type: 'string' },
          pages: { type: 'integer' },
          rows: { type: 'integer' },
          files: { type: 'array', items: { type: 'string' } },
        },
      },
      error_message: nullableOf({ type: 'string' }),
      attempts: { type: 'integer', minimum: 0 },
      max_attempts: { type: 'integer', minimum: 1 },
      enqueued_at: { type: 'string', format: 'date-time' },
      started_at: nullableOf({ type: 'string', format: 'date-time' }),
      finished_at: nullableOf({ type: 'string', format: 'date-time' }),
      inbound_event_id: { ...UUID, description: 'a job made of an inbound webhook event: the event' },
      context: { description: "a job made of an inbound webhook event: the sender's payload" },
    },
    additionalProperties: false,
  },
  JobItem: { type: 'object', required: ['data'], properties: { data: ref('schemas', 'Job') }, additionalProperties: false },
  JobList: {
    type: 'object',
    required: ['data', 'next_cursor', 'count'],
    properties: {
      data: { type: 'array', items: ref('schemas', 'Job') },
      next_cursor: { type: ['string', 'null'], format: 'date-time', description: 'send as cursor for the next page; null on the last' },
      count: { type: 'integer', minimum: 0 },
    },
    additionalProperties: false,
  },
};

const JOB_LIST_QUERY: Json[] = [
  { name: 'limit', in: 'query', schema: { type: 'integer', minimum: 1, maximum: 200, default: 50 } },
  { name: 'status', in: 'query', schema: { type: 'string', enum: ['queued', 'running', 'succeeded', 'failed', 'dead'] } },
  { name: 'job_type', in: 'query', schema: { type: 'string' } },
  { name: 'cursor', in: 'query', description: 'enqueued_at of the last item of the previous page', schema: { type: 'string', format: 'date-time' } },
];

const jsonContent = (schema: Json) => ({ 'application/json': { schema } });

const mib = (bytes: number) => bytes / (1024 * 1024);
const RAW_UPLOAD: Json = {
  type: 'object',
  required: ['device_id', 'file'],
  properties: {
    device_id: { ...UUID, description: 'the registered device the file came from' },
    file: {
      type: 'string',
      contentMediaType: 'application/octet-stream',
      description: `the raw file: at most ${mib(RAW_FILE_MAX_BYTES)} MiB, ${mib(MZML_MAX_BYTES)} MiB for mzML (413 beyond)`,
    },
  },
};

const list = (successDescription: string, query: z.ZodType): Op => ({
  successStatus: '200',
  successDescription,
  successSchema: okSchema('List'),
  query: queryParams(query),
});
const created = (successDescription: string, body: z.ZodType): Op => ({
  successStatus: '201',
  successDescription,
  successSchema: okSchema('Item'),
  body: jsonSchemaOf(body),
  bodyRequired: true,
});
const read = (successDescription: string): Op => ({ successStatus: '200', successDescription, successSchema: okSchema('Item') });
const deleted = (successDescription: string): Op => ({ successStatus: '204', successDescription });

/** The telemetry service's operations (module analytics_qc), from the schemas it validates with. */
const TELEMETRY_OPS: Record<TelemetryOp | TelemetryAdminOp, Op> = {
  listPoints: list('environmental points (at most 500)', pointSchemas.list),
  createPoint: created('the point', pointSchemas.create),
  updatePoint: { ...created('the point', pointSchemas.update), successStatus: '200' },
  adminListPoints: list('every point of the organisation, active or not, oldest first', adminPageQuery),
  deletePoint: {
    successStatus: '204',
    successDescription: 'point deleted; a point with readings is deactivated instead and answered 200 with the point (active: false)',
    extraStatuses: [{ status: '200', description: 'the point had readings: deactivated, not deleted', schema: okSchema('EnvironmentalPointItem') }],
  },
  listReadings: list('readings, newest first', readingSchemas.list),
  ingestReadings: {
    ...created(
      '{created, breaches, readings, rejected}: each reading is stored or rejected on its own (rejected lists index, code, message); 422 all_readings_rejected when none is stored',
      readingSchemas.ingest,
    ),
    extraStatuses: [{ status: '422', description: 'every reading was rejected (all_readings_rejected, details.rejected)', schema: okSchema('Error') }],
  },
  registerDevice: created('the device', deviceSchemas.register),
  listDevices: list('devices', deviceSchemas.list),
  deleteDevice: deleted('device deleted (needs an administrator role)'),
  ingestResult: created('the result with its values', resultSchemas.ingest),
  listResults: list('results, newest first', resultSchemas.list),
  getResult: read('the result with its values and raw file, if any'),
  getResultChart: read('chart data of the result'),
  connectorHeartbeat: {
    ...created('the connector: 201 when this heartbeat registered it, 200 after', connectorSchemas.heartbeat),
    bodyRequired: false,
    extraStatuses: [{ status: '200', description: 'the connector, already registered', schema: okSchema('Item') }],
  },
  listConnectors: list('connectors with their status (online, stale, offline)', connectorSchemas.list),
  getConnector: read('the connector'),
  deleteConnector: deleted('connector deleted (needs an administrator role)'),
};

const rotation = (what: string): Op => ({
  successStatus: '200',
  successDescription: `{secret, previous_secret_expires_at}: the new secret is shown only here; ${what}`,
  successSchema: okSchema('Item'),
});

/** The webhooks service's management operations, from the schemas the gateway validates with. */
const WEBHOOKS_ADMIN_OPS: Record<WebhooksAdminAction, Op> = {
  createSubscription: created(
    `the subscription {id, url, events, secret, active, signature_scheme}; the secret is shown only here. ${WEBHOOK_SIGNATURE_RULES}`,
    webhooksAdminBodies.createSubscription,
  ),
  listSubscriptions: list(
    'subscriptions {id, url, events, active, disabled_reason, created_at, updated_at, previous_secret_expires_at, signature_scheme}, oldest first; never the secret',
    adminPageQuery,
  ),
  getSubscription: read('the subscription, without its secret'),
  updateSubscription: {
    ...created(
      'the subscription; active: true also clears an automatic disabling; a new signature_scheme ends a rotation overlap, and when the current secret ' +
        'cannot sign with it (standard-webhooks needs whsec_ + base64) the answer holds a new secret, shown only there',
      webhooksAdminBodies.updateSubscription,
    ),
    successStatus: '200',
  },
  deleteSubscription: deleted('subscription and its delivery log deleted'),
  rotateSubscriptionSecret: rotation(
    'it signs from now on, and the replaced one keeps signing for 24 hours (two v1 values in X-Service-Signature, or two v1, entries in webhook-signature)',
  ),
  listDeliveries: { ...list("the subscription's deliveries, newest first", webhooksDeliveriesQuery), successSchema: { type: 'object' } },
  redeliver: {
    successStatus: '202',
    successDescription:
      'the delivery is sent again with the same id (envelope id, X-Service-Delivery, webhook-id) and event, freshly signed; 409 delivery_pending while it is still scheduled',
    successSchema: okSchema('Item'),
  },
  createInboundEndpoint: {
    ...created('the endpoint {id, slug, url, secret, ...}; the secret is shown only here', webhooksAdminBodies.createInboundEndpoint),
    bodyRequired: false,
  },
  listInboundEndpoints: list(
    'inbound endpoints {id, slug, url, allowed_event_types, job_type, active, created_at, updated_at, previous_secret_expires_at}; never the secret',
    adminPageQuery,
  ),
  getInboundEndpoint: read('the endpoint, without its secret'),
  updateInboundEndpoint: {
    ...created('the endpoint; job_type null removes it; active false makes its URL answer 404', webhooksAdminBodies.updateInboundEndpoint),
    successStatus: '200',
  },
  deleteInboundEndpoint: deleted('endpoint and the events it received deleted; its URL answers 404'),
  rotateInboundSecret: rotation('requests signed with it or with the replaced one are accepted for 24 hours'),
};

/** A management route's answer, query and body, by its action. */
function describeAdminOp(h: Extract<RouteHandler, { kind: 'admin' }>): Op {
  const s = ADMIN_SUCCESS[h.action];
  const schema = (adminBodies as Partial<Record<AdminAction, z.ZodType>>)[h.action];
  const query = adminQueries[h.action];
  return {
    successStatus: s.status,
    successDescription: s.description,
    successSchema: s.status === '204' ? undefined : okSchema(MANAGEMENT_ANSWERS[h.action] ?? (query ? 'List' : 'Item')),
    query: query ? queryParams(query) : undefined,
    body: schema ? okSchema(`Admin${pascal(h.action)}Body`) : undefined,
    bodyRequired: schema !== undefined,
  };
}

/** The password and refresh grants of POST /auth/v1/token. */
const TOKEN_GRANT: Op = {
  successStatus: '200',
  successDescription: 'tokens',
  successSchema: okSchema('TokenResponse'),
  body: jsonSchemaOf(grantBody),
  bodyRequired: true,
  extraStatuses: [
    { status: '401', description: 'wrong email or password, or a refresh token that is not (or no longer) valid', schema: okSchema('Error') },
    {
      status: '429',
      description:
        'too many password attempts from this address, at this account or at all (the right password too); ' +
        'while the account has had too many from everywhere, each address has 3 tries at it in the hour',
      schema: okSchema('Error'),
      headers: { 'Retry-After': ref('headers', 'Retry-After') },
    },
  ],
};

/** POST /v1/experiments/{id}/sign: the signature manifest, and who may not sign. */
const SIGN_EXPERIMENT: Op = {
  successStatus: '200',
  successDescription:
    'the experiment with its signature manifest (signatures: {id, meaning, signer_id, signer_name, signed_at, content_hash, hash_algorithm, content_matches}); ' +
    '409 already_signed (that meaning is signed), authorship_required',
  successSchema: okSchema('SignedExperimentItem'),
  body: jsonSchemaOf(signBody),
  bodyRequired: true,
  extraStatuses: [
    {
      status: '403',
      description:
        'refused, and nothing changed: the password is wrong (invalid_password); the role may not sign (a viewer: forbidden); ' +
        'authorship by someone who is not the author of this version (its author_id or creator; for a version no person wrote, ' +
        'anyone who may change it) or who may not change it (forbidden); review or approval by an author of the entry ' +
        '(signer_is_author) or by someone who signed this version already (signer_already_signed)',
      schema: okSchema('Error'),
    },
  ],
};

/** An experiment's versions: amend, list the versions, read a version's signatures. */
const EXPERIMENT_OPS: Record<Extract<RouteHandler, { kind: 'experiment' }>['op'], Op> = {
  amend: {
    successStatus: '201',
    successDescription:
      'the new version {version, amends_id, amendment_reason, ...}; 409 experiment_not_signed (change it with PATCH) or already_amended (amend the latest version)',
    successSchema: okSchema('ExperimentItem'),
    body: jsonSchemaOf(amendBody),
    bodyRequired: true,
  },
  versions: {
    successStatus: '200',
    successDescription: "every version of the experiment's entry, oldest first",
    successSchema: okSchema('ExperimentList'),
  },
  signatures: {
    successStatus: '200',
    successDescription: 'the signature manifest of this version, in signing order',
    successSchema: okSchema('SignatureList'),
  },
};

/** A lab order route's answer, body and query (services' bodies; the records' answer shapes). */
function describeLabOrdersOp(h: Extract<RouteHandler, { kind: 'lab_orders' }>): Op {
  const d = describeLabOrderOp(h.op);
  return {
    successStatus: d.successStatus,
    successDescription: d.successDescription,
    successSchema: okSchema(ORDER_ANSWERS[h.op] ?? d.successSchemaRef),
    body: d.bodyRef ? okSchema(d.bodyRef) : undefined,
    bodyRequired: d.bodyRef !== undefined,
    query: d.query,
  };
}

/** A job route: queue, list, read, and the artifact's media types. */
function describeJobsOp(h: Extract<RouteHandler, { kind: 'jobs' }>): Op {
  if (h.op === 'artifact') {
    return {
      successStatus: '200',
      successDescription: 'the artifact file, streamed (Content-Disposition names it)',
      successContentType: 'application/pdf',
      successSchema: BINARY,
      // an .eln export is a ZIP of its own media type; an .eln import's artifact is its JSON report
      extraContent: {
        'application/zip': { schema: BINARY },
        'application/vnd.eln+zip': { schema: BINARY },
        'application/json': { schema: ELN_IMPORT_REPORT },
        'application/octet-stream': { schema: BINARY },
      },
    };
  }
  return {
    // accepted, not done: the job runs in the background
    successStatus: h.op === 'create' ? '202' : '200',
    successDescription: { create: 'the queued job', list: 'jobs, newest first', get: 'the job' }[h.op],
    successSchema: okSchema(h.op === 'list' ? 'JobList' : 'JobItem'),
    body: h.op === 'create' ? JOB_CREATE : undefined,
    bodyRequired: h.op === 'create',
    query: h.op === 'list' ? JOB_LIST_QUERY : undefined,
    links:
      h.op === 'create'
        ? { getJob: { operationId: 'get_v1_jobs_id', parameters: { id: '$response.body#/data/id' }, description: 'the job just queued: poll it' } }
        : undefined,
  };
}

/** A telemetry route (public or management), with its typed answer where it has one. */
function describeTelemetryOp(h: Extract<RouteHandler, { kind: 'telemetry' | 'telemetry_admin' }>): Op {
  const op = TELEMETRY_OPS[h.op];
  const answer = TELEMETRY_ANSWERS[h.op];
  if (!answer) return op;
  // the same record where an operation answers it on another status too (a heartbeat's 200, a deactivated point)
  const extraStatuses = op.extraStatuses?.map((x) =>
    x.status === '200' && x.schema && JSON.stringify(x.schema).includes('/Item"') ? { ...x, schema: okSchema(answer) } : x,
  );
  return { ...op, successSchema: okSchema(answer), extraStatuses };
}

/** The notification routes: create for members, the user's list, mark read. */
const NOTIFICATION_OPS: Record<Extract<RouteHandler, { kind: 'notifications' }>['op'], Op> = {
  create: {
    ...created('one notification per target member; 400 no_valid_targets when no target is a member', notificationSchemas.create),
    successSchema: okSchema('NotificationsCreated'),
  },
  list: {
    ...list("the token user's notifications, newest first; Warning when more exist", notificationSchemas.list),
    successSchema: okSchema('NotificationList'),
  },
  update: {
    ...created('the notification, read_at set or cleared (its owner only)', notificationSchemas.update),
    successStatus: '200',
    successSchema: okSchema('NotificationItem'),
  },
};

/** What each handler kind takes and answers; a kind not listed here gets a generic description. */
function describe(route: Route): Op {
  const h = route.handler;
  const fallbackStatus = route.method === 'POST' ? '201' : route.method === 'DELETE' ? '204' : '200';
  switch (h.kind) {
    case 'health':
      return { successStatus: '200', successDescription: 'alive', successSchema: { type: 'object', properties: { status: { const: 'ok' } } } };
    case 'openapi':
      return { successStatus: '200', successDescription: 'this document', successSchema: { type: 'object' } };
    case 'ping':
      return { successStatus: '200', successDescription: 'who the token is', successSchema: okSchema('Ping') };
    case 'record':
      return describeRecordOp(route, h);
    case 'audit':
      return { successStatus: '200', successDescription: 'keyset-paged audit records', successSchema: okSchema('AuditList'), query: queryParams(auditQuery) };
    case 'audit_verify':
      return {
        successStatus: '200',
        successDescription:
          "the organisation's audit hash chain checked: {data: {ok: true, entries, head_hash}} or {data: {ok: false, entries, broken: {seq, id, problem, expected_seq?}}}",
        successSchema: okSchema('AuditChainReportItem'),
      };
    case 'admin':
      return describeAdminOp(h);
    case 'idp_oauth':
      return IDP_OAUTH_OPS[h.op];
    case 'token_grant':
      return TOKEN_GRANT;
    case 'sign_experiment':
      return SIGN_EXPERIMENT;
    case 'experiment':
      return EXPERIMENT_OPS[h.op];
    case 'lab_orders':
      return describeLabOrdersOp(h);
    case 'jobs':
      return describeJobsOp(h);
    case 'telemetry':
    case 'telemetry_admin':
      return describeTelemetryOp(h);
    case 'raw_upload':
      return {
        successStatus: '201',
        successDescription: 'a result of the device with no values, its raw_file the stored file {id, filename, size, sha256, content_type}',
        successSchema: okSchema('ResultItem'),
        body: RAW_UPLOAD,
        bodyType: 'multipart/form-data',
        bodyRequired: true,
        extraStatuses: [{ status: '413', description: 'the file is over its limit (payload_too_large)', schema: okSchema('Error') }],
      };
    case 'notifications':
      return NOTIFICATION_OPS[h.op];
    case 'webhooks_admin': {
      const op = WEBHOOKS_ADMIN_OPS[h.action];
      const answer = WEBHOOK_ANSWERS[h.action];
      return answer ? { ...op, successSchema: okSchema(answer) } : op;
    }
    case 'dead_letters':
      return h.op === 'list'
        ? { ...list("every service's dead letters, by service, latest first", deadLettersQuery), successSchema: okSchema('DeadLetterList') }
        : {
            successStatus: '202',
            successDescription: 'the message is back in its outbox, with its id; 404 when no service has it',
            successSchema: okSchema('DeadLetterReplayItem'),
          };
    case 'realtime_jobs':
      return REALTIME_JOBS;
    case 'oauth_authorize':
      return OAUTH_AUTHORIZE;
    case 'oauth_token':
      return OAUTH_TOKEN;
    case 'oauth_metadata':
      return {
        successStatus: '200',
        successDescription: `OAuth metadata (${h.document.replace(/_/g, ' ')}; RFC 8414 / RFC 9728)`,
        successSchema: OAUTH_METADATA,
      };
    case 'mcp':
      return MCP;
    case 'inbound_webhook':
      return INBOUND_WEBHOOK;
    case 'calendar':
      return CALENDAR_OPS[h.op];
    case 'pending':
      return {
        successStatus: fallbackStatus,
        successDescription: 'in the contract; answers 503 until its service is part of the deployment',
        body: route.method === 'GET' || route.method === 'DELETE' ? undefined : { type: 'object' },
      };
    default:
      return {
        successStatus: fallbackStatus,
        successDescription: 'success',
        successSchema: fallbackStatus === '204' ? undefined : { type: 'object' },
        body: route.method === 'GET' || route.method === 'DELETE' ? undefined : { type: 'object' },
      };
  }
}

/** Query parameters from a zod object schema (refinements across keys stay in the handler). */
function queryParams(schema: z.ZodType): Json[] {
  const s = jsonSchemaOf(schema) as { properties?: Record<string, Json>; required?: string[] };
  return Object.entries(s.properties ?? {}).map(([name, p]) => ({
    name,
    in: 'query',
    required: (s.required ?? []).includes(name),
    schema: p,
  }));
}

/** Error statuses a route can answer, from what its pipeline does. */
function errorStatuses(route: Route, op: Op): string[] {
  const params = /:[a-z_]+/.test(route.path);
  const publicAuth = route.auth === 'bearer' || route.auth === 'session';
  const out = new Set<string>();
  // every route refuses a query parameter PostgreSQL cannot store (NUL) and a body that is not JSON
  out.add('400');
  if (route.auth !== 'none') out.add('401');
  if (publicAuth) out.add('403');
  if (params) out.add('404');
  const h = route.handler;
  const conflicts =
    (h.kind === 'admin' && (route.method !== 'DELETE' || h.action === 'deleteDepartment')) ||
    (h.kind === 'webhooks_admin' && (h.action === 'createSubscription' || h.action === 'createInboundEndpoint' || h.action === 'redeliver'));
  // telemetry writes name devices, connectors and points that may be gone (404) or whose names are taken (409)
  const telemetryWrite = (h.kind === 'telemetry' || h.kind === 'telemetry_admin' || h.kind === 'raw_upload') && route.method !== 'GET';
  if (telemetryWrite) out.add('404');
  if (route.idempotent || h.kind === 'sign_experiment' || conflicts || telemetryWrite) out.add('409');
  // every JSON body is read with a 1 MB bound
  if (op.body) out.add('413');
  // the public API's rate limit; the operator door's throttle of an address guessing the token
  if (route.auth !== 'none') out.add('429');
  if (route.service || route.handler.kind === 'pending' || route.handler.kind === 'dead_letters') out.add('503');
  return [...out];
}

const toOpenApiPath = (path: string) => path.replace(/:([a-z_]+)/g, '{$1}');

function pathParam(name: string): Json {
  const uuid = name === 'id' || name.endsWith('_id') || name.endsWith('Id');
  return { name, in: 'path', required: true, schema: uuid ? UUID : { type: 'string' } };
}

function operation(route: Route): Json {
  const op = describe(route);
  const publicAuth = route.auth === 'bearer' || route.auth === 'session';
  const h = route.handler;
  const rateHeaders = publicAuth
    ? { 'X-RateLimit-Limit': ref('headers', 'X-RateLimit-Limit'), 'X-RateLimit-Remaining': ref('headers', 'X-RateLimit-Remaining') }
    : {};
  const commonHeaders = { 'X-Request-Id': ref('headers', 'X-Request-Id'), ...rateHeaders };

  const parameters: Json[] = [...route.path.matchAll(/:([a-z_A-Z]+)/g)].map((m) => pathParam(m[1]!));
  if (publicAuth) parameters.push(ref('parameters', 'OrgIdHeader'), ref('parameters', 'OrgIdQuery'));
  if (route.idempotent) parameters.push(ref('parameters', 'IdempotencyKey'));
  if (honoursTestMode(h)) parameters.push(ref('parameters', 'TestMode'));
  if (op.query) parameters.push(...op.query);

  const responses: Record<string, Json> = {};
  const successHeaders = {
    ...commonHeaders,
    ...(route.idempotent ? { 'Idempotent-Replay': ref('headers', 'Idempotent-Replay') } : {}),
    ...((h.kind === 'lab_orders' && h.op === 'list_results') || (h.kind === 'record' && h.op === 'list') ? { Warning: ref('headers', 'Warning') } : {}),
  };
  responses[op.successStatus] = {
    description: op.successDescription,
    headers: { ...successHeaders, ...(op.successHeaders ?? {}) },
    ...(op.successSchema ? { content: { [op.successContentType ?? 'application/json']: { schema: op.successSchema }, ...(op.extraContent ?? {}) } } : {}),
    ...(op.links && Object.keys(op.links).length ? { links: op.links } : {}),
  };
  for (const x of op.extraStatuses ?? []) {
    responses[x.status] = {
      description: x.description,
      headers: { ...commonHeaders, ...(x.headers ?? {}) },
      ...(x.schema ? { content: { [x.contentType ?? 'application/json']: { schema: x.schema } } } : {}),
    };
  }
  markCreated(route, responses);
  for (const status of op.ownErrors ? [] : errorStatuses(route, op)) {
    if (responses[status]) continue;
    const schema = status === '409' && route.idempotent ? { oneOf: [okSchema('IdempotencyConflict'), okSchema('Error')] } : okSchema('Error');
    const headers = status === '429' ? { ...commonHeaders, 'Retry-After': ref('headers', 'Retry-After') } : commonHeaders;
    responses[status] = {
      description: status === '409' && route.idempotent ? 'Idempotency-Key reused with another payload, or still in progress' : REASONS[status]!,
      headers,
      content: jsonContent(schema),
    };
  }
  // Any request, whatever its route: Node's HTTP parser refuses it before routing, so
  // the answer is the error envelope without the gateway's headers (client-errors.ts).
  responses['431'] = { description: REASONS['431'], content: jsonContent(okSchema('Error')) };
  responses.default = { description: 'Unexpected error (500 carries details.error_id)', content: jsonContent(okSchema('Error')) };

  const scope = route.scope;
  const scheme =
    h.kind === 'mcp' ? 'mcp' : route.auth === 'none' ? undefined : route.auth === 'operator' ? 'operator' : route.auth === 'session' ? 'session' : 'bearer';
  const notes = [
    scope !== 'none' ? `Requires scope \`${scope}\` (write implies read; admin and * imply all).` : undefined,
    route.module ? `Needs the organisation module \`${route.module}\`.` : undefined,
    route.idempotent ? 'Honours Idempotency-Key.' : undefined,
  ].filter(Boolean);

  return {
    operationId: operationIdOf(route.method, route.path),
    summary: `${route.method} ${toOpenApiPath(route.path)}`,
    ...(notes.length ? { description: notes.join(' ') } : {}),
    tags: [tagOf(route)],
    security: scheme === 'mcp' ? [{ mcp: ['read'] }] : scheme ? [{ [scheme]: scope === 'none' ? [] : [scope] }] : [],
    parameters,
    ...(op.body ? { requestBody: { required: op.bodyRequired ?? false, content: { [op.bodyType ?? 'application/json']: { schema: op.body } } } } : {}),
    responses,
    'x-required-scope': scope,
    ...(route.module ? { 'x-module': route.module } : {}),
    ...(route.service ? { 'x-service': route.service } : {}),
    'x-idempotent': route.idempotent,
  };
}

function tagOf(route: Route): string {
  if (route.path.startsWith('/admin/')) return 'management';
  if (route.path.startsWith('/auth/') || route.path.startsWith('/app/')) return 'application';
  const h = route.handler;
  if (h.kind === 'record') return h.resource;
  if (h.kind === 'health' || h.kind === 'ping' || h.kind === 'openapi') return 'meta';
  return route.path.split('/')[2] ?? 'other';
}

/** The routes of the document being built, by "METHOD path" (links name only operations that exist). */
let ROUTES_BY_KEY = new Set<string>();

const METHOD_ORDER: HttpMethod[] = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'];

/** The whole document; every route of the table appears once under its method. */
export function openApiDocument(routes: Route[], opts: OpenApiOptions = {}): Json {
  ROUTES_BY_KEY = new Set(routes.map((r) => `${r.method} ${r.path}`));
  const paths: Record<string, Record<string, Json>> = {};
  const sorted = [...routes].sort((a, b) => METHOD_ORDER.indexOf(a.method) - METHOD_ORDER.indexOf(b.method));
  for (const r of sorted) (paths[toOpenApiPath(r.path)] ??= {})[r.method.toLowerCase()] = operation(r);
  const adminSchemas = Object.fromEntries(
    Object.entries(adminBodies).map(([action, schema]) => [`Admin${pascal(action)}Body`, jsonSchemaOf(schema as z.ZodType)]),
  );
  return {
    openapi: '3.1.0',
    info: {
      title: 'Laboratory Notebook Service API',
      version: opts.version ?? '1.1.0',
      license: { name: 'Proprietary', identifier: 'LicenseRef-Proprietary' },
      description:
        'Public REST API (/v1), management API (/admin/v1, operator token) and user sign-in (/auth/v1, /app/v1). ' +
        'Every request acts within one organisation. Errors use {error: {code, message, details?}}, except the idempotency conflict. ' +
        'HEAD is answered wherever GET is: the same status and headers, no body (a stream is not opened).',
    },
    servers: opts.servers ?? [{ url: '/', description: 'this gateway' }],
    security: [{ bearer: [] }],
    paths,
    webhooks: WEBHOOKS,
    components: {
      securitySchemes: SECURITY_SCHEMES,
      schemas: {
        ...SCHEMAS,
        ...recordSchemas(new Set(routes.flatMap((r) => (r.handler.kind === 'record' && r.handler.op === 'list' ? [r.handler.resource] : [])))),
        ...adminSchemas,
        ...LAB_ORDER_SCHEMAS,
        ...ORDER_SCHEMAS,
        LabResultList: typedResultList(LAB_ORDER_SCHEMAS.LabResultList!),
        ...JOB_CREATE_SCHEMAS,
        ...JOB_SCHEMAS,
        ...MANAGEMENT_SCHEMAS,
        ...TELEMETRY_SCHEMAS,
        ...CALENDAR_SCHEMAS,
      },
      parameters: PARAMETERS,
      headers: HEADERS,
    },
  };
}
