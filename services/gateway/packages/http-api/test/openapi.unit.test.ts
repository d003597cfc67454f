import { z } from 'zod';
import { adminBodies } from '../src/requests/admin';
import { openApiDocument } from '../src/openapi';
import { jsonSchemaOf } from '../src/openapi-parts';
import { RECORD_BODIES as NOTEBOOK_RECORDS } from '@lab/notebook/record-schemas';
import { RECORD_BODIES as INVENTORY_RECORDS } from '@lab/inventory/record-schemas';
import { RECORD_BODIES as EQUIPMENT_RECORDS } from '@lab/equipment/record-schemas';
import { ROUTES, type Route } from '../src/routes';
import { SUBSCRIBABLE_FILTERS } from '@lab/webhooks';

type Operation = Record<string, any>;
type Doc = {
  openapi: string;
  info: { title: string; version: string };
  servers: unknown[];
  paths: Record<string, Record<string, Operation>>;
  components: Record<string, Record<string, any>>;
};

const doc = openApiDocument(ROUTES) as unknown as Doc;
const oasPath = (p: string) => p.replace(/:([A-Za-z_]+)/g, '{$1}');
const opOf = (r: Route): Operation => {
  const op = doc.paths[oasPath(r.path)]?.[r.method.toLowerCase()];
  if (!op) throw new Error(`${r.method} ${r.path} is missing from the document`);
  return op;
};
const label = (r: Route) => `${r.method} ${r.path}`;

/** Resolves a local $ref (or returns the object itself). */
function deref(x: any): any {
  if (!x || typeof x.$ref !== 'string') return x;
  const parts = (x.$ref as string).replace(/^#\//, '').split('/');
  let cur: any = doc;
  for (const p of parts) cur = cur?.[p];
  return cur;
}
const paramNames = (op: Operation, where?: string) =>
  (op.parameters as unknown[])
    .map(deref)
    .filter((p) => !where || p.in === where)
    .map((p) => p.name as string);

async function validate(document: unknown) {
  const { Validator } = await import('@seriousme/openapi-schema-validator');
  const v = new Validator();
  const res = await v.validate(JSON.parse(JSON.stringify(document)));
  return { ...res, version: v.version };
}

describe('OpenAPI document', () => {
  it('is a valid OpenAPI 3.1 document', async () => {
    const res = await validate(doc);
    expect(res.errors ?? []).toEqual([]);
    expect(res.valid).toBe(true);
    expect(res.version).toBe('3.1');
    expect(doc.info).toMatchObject({ version: '1.1.0' });
    expect(doc.servers.length).toBeGreaterThan(0);
  });

  it('the validator refuses a broken document (the check above can fail)', async () => {
    const broken = JSON.parse(JSON.stringify(doc));
    broken.paths['/v1/health'].get.responses = 'none';
    expect((await validate(broken)).valid).toBe(false);
  });

  it('every $ref points at something that exists', () => {
    const refs: string[] = [];
    const walk = (x: unknown) => {
      if (Array.isArray(x)) x.forEach(walk);
      else if (x && typeof x === 'object') {
        for (const [k, v] of Object.entries(x)) {
          if (k === '$ref' && typeof v === 'string') refs.push(v);
          else walk(v);
        }
      }
    };
    walk(doc);
    expect(refs.length).toBeGreaterThan(0);
    expect(refs.filter((r) => deref({ $ref: r }) === undefined)).toEqual([]);
  });

  describe.each(ROUTES.map((r) => [label(r), r] as const))('%s', (_name, route) => {
    const op = opOf(route);

    it('appears with its scope, module and security', () => {
      expect(op['x-required-scope']).toBe(route.scope);
      expect(op['x-module']).toBe(route.module);
      if (route.handler.kind === 'mcp') expect(op.security).toEqual([{ mcp: ['read'] }]);
      else if (route.auth === 'none') expect(op.security).toEqual([]);
      else {
        const scheme = { bearer: 'bearer', session: 'session', operator: 'operator' }[route.auth];
        expect(op.security).toEqual([{ [scheme]: route.scope === 'none' ? [] : [route.scope] }]);
        expect(doc.components.securitySchemes[scheme]).toMatchObject({ type: 'http', scheme: 'bearer' });
        expect(op.responses['401']).toBeDefined();
      }
      if (route.scope !== 'none') expect(op.description).toContain(route.scope);
    });

    it('documents Idempotency-Key exactly on idempotent routes', () => {
      expect(paramNames(op).includes('Idempotency-Key')).toBe(route.idempotent);
      if (route.idempotent) {
        const conflict = op.responses['409'].content['application/json'].schema;
        expect(JSON.stringify(conflict)).toContain('#/components/schemas/IdempotencyConflict');
      }
    });

    it('documents every path parameter', () => {
      for (const m of route.path.matchAll(/:([A-Za-z_]+)/g)) expect(paramNames(op)).toContain(m[1]);
    });

    it('documents organisation selection, rate-limit headers and 429 on public routes', () => {
      const publicApi = route.auth === 'bearer' || route.auth === 'session';
      expect(paramNames(op, 'header').includes('X-Org-Id')).toBe(publicApi);
      expect(paramNames(op, 'query').includes('org_id')).toBe(publicApi);
      // every authenticated route is throttled (the operator door too); of the others, sign-in, sign-in pages, registration and calendar feeds
      const throttled =
        route.auth !== 'none' ||
        ['oauth_authorize', 'token_grant'].includes(route.handler.kind) ||
        (route.handler.kind === 'idp_oauth' && route.handler.op !== 'token') ||
        (route.handler.kind === 'calendar' && route.handler.op === 'feed');
      expect(op.responses['429'] !== undefined).toBe(throttled);
      if (publicApi) {
        expect(Object.keys(op.responses['429'].headers)).toEqual(expect.arrayContaining(['Retry-After', 'X-RateLimit-Limit', 'X-RateLimit-Remaining']));
        const success = Object.keys(op.responses).find((s) => s.startsWith('2'))!;
        expect(Object.keys(op.responses[success].headers)).toEqual(expect.arrayContaining(['X-RateLimit-Limit', 'X-RateLimit-Remaining']));
        expect(op.responses['403']).toBeDefined();
      }
    });

    it('answers 503 when it depends on a service', () => {
      if (route.service) expect(op.responses['503']).toBeDefined();
    });
  });

  it('marks X-Test-Mode on generic CRUD writes only', () => {
    for (const r of ROUTES) {
      // the spec's generic CRUD resources; stock movements have their own section
      const write =
        r.handler.kind === 'record' && !r.handler.nested && r.handler.resource !== 'stock-movements' && r.handler.op !== 'list' && r.handler.op !== 'get';
      expect([label(r), paramNames(opOf(r)).includes('X-Test-Mode')]).toEqual([label(r), write]);
    }
  });

  it('describes the create body of every generic resource from the zod schema its service validates with, closed to unknown fields', () => {
    const bodies: Record<string, { create: z.ZodType }> = { ...NOTEBOOK_RECORDS, ...INVENTORY_RECORDS, ...EQUIPMENT_RECORDS };
    for (const r of ROUTES) {
      if (r.handler.kind !== 'record' || r.handler.op !== 'create') continue;
      const own = bodies[r.handler.resource];
      expect([r.handler.resource, own !== undefined]).toEqual([r.handler.resource, true]);
      const body = deref(opOf(r).requestBody.content['application/json'].schema);
      const { description: _d, ...schema } = body;
      expect(schema).toEqual(jsonSchemaOf(own!.create));
    }
    const stock = deref({ $ref: '#/components/schemas/StockItemCreate' });
    expect(stock.required).toEqual(expect.arrayContaining(['catalog_id', 'quantity', 'unit']));
    expect(stock.additionalProperties).toBe(false);
  });

  it('types every record answer field by field: read-only fields marked, nullable as type arrays, closed', () => {
    const sample = deref({ $ref: '#/components/schemas/Sample' });
    expect(sample.additionalProperties).toBe(false);
    expect(sample.properties.id).toMatchObject({ type: 'string', format: 'uuid', readOnly: true });
    expect(sample.properties.created_at).toMatchObject({ format: 'date-time', readOnly: true });
    expect(sample.properties.type.type).toEqual(['string', 'null']);
    expect(sample.properties.name.type).toBe('string');
    const movement = deref({ $ref: '#/components/schemas/StockMovement' });
    expect(movement.properties.quantity_after).toMatchObject({ type: 'number', readOnly: true });
    expect(deref({ $ref: '#/components/schemas/StockMovementCreate' }).properties.quantity_after).toBeUndefined();
    const list = doc.paths['/v1/samples']!.get!;
    expect(list.parameters.map(deref).find((p: any) => p.name === 'order_by').schema.enum).toEqual(expect.arrayContaining(['created_at', 'name']));
  });

  it('gives created records a Location header and links to their item operations', () => {
    const created = doc.paths['/v1/samples']!.post!.responses['201'];
    expect(Object.keys(created.headers)).toContain('Location');
    expect(created.links.getSample).toEqual(
      expect.objectContaining({ operationId: doc.paths['/v1/samples/{id}']!.get!.operationId, parameters: { id: '$response.body#/data/id' } }),
    );
    // test mode has its own status where the real answer's differs: no ambiguous oneOf there
    expect(created.content['application/json'].schema).toEqual({ $ref: '#/components/schemas/SampleItem' });
    expect(doc.paths['/v1/samples']!.post!.responses['200'].content['application/json'].schema).toEqual({ $ref: '#/components/schemas/TestModeEcho' });
  });

  it('gives every create whose resource can be read a Location header and a link to the read', () => {
    // A POST answering 201 or 202 below which the document has an item GET: the client follows Location there.
    const missing: string[] = [];
    for (const [path, ops] of Object.entries(doc.paths)) {
      const made = ops.post?.responses['201'] ?? ops.post?.responses['202'];
      if (!made) continue;
      const item = Object.keys(doc.paths).find((p) => p.startsWith(`${path}/{`) && p.split('/').length === path.split('/').length + 1 && doc.paths[p]!.get);
      if (!item) continue;
      const linked = Object.values((made.links ?? {}) as Record<string, { operationId: string }>).some(
        (l) => l.operationId === doc.paths[item]!.get!.operationId,
      );
      if (!made.headers?.Location || !linked) missing.push(`POST ${path} -> GET ${item}`);
    }
    expect(missing).toEqual([]);
    const amended = doc.paths['/v1/experiments/{id}/amendments']!.post!.responses['201'];
    expect(amended.headers.Location).toBeDefined();
    expect(amended.links.get).toEqual(
      expect.objectContaining({ operationId: doc.paths['/v1/experiments/{id}']!.get!.operationId, parameters: { id: '$response.body#/data/id' } }),
    );
  });

  it('types every JSON success answer: no object without its fields, in the answer or its data', () => {
    // GET /v1/openapi.json answers this document, whose own schema is OpenAPI 3.1's
    const untyped: string[] = [];
    const visit = (x: any, at: string, depth: number): void => {
      const s = deref(x);
      if (!s || depth > 6) return;
      const alternatives = [...(s.oneOf ?? []), ...(s.anyOf ?? []), ...(s.allOf ?? [])];
      alternatives.forEach((a: any, i: number) => visit(a, `${at}/${i}`, depth + 1));
      const isObject = s.type === 'object' || (Array.isArray(s.type) && s.type.includes('object'));
      if (isObject && !s.properties && !s.additionalProperties && !alternatives.length) untyped.push(at);
      if (s.properties?.data) visit(s.properties.data, `${at}.data`, depth + 1);
      if (s.items) visit(s.items, `${at}[]`, depth + 1);
    };
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        if (path === '/v1/openapi.json') continue;
        for (const [status, r] of Object.entries(op.responses as Record<string, any>)) {
          if (!status.startsWith('2')) continue;
          for (const [type, c] of Object.entries((deref(r).content ?? {}) as Record<string, any>)) {
            if (type.includes('json')) visit(c.schema, `${method.toUpperCase()} ${path} ${status}`, 0);
          }
        }
      }
    }
    expect(untyped).toEqual([]);
  });

  it('documents the realtime channel as server-sent events and the MCP function with its OAuth scheme', () => {
    expect(Object.keys(doc.paths['/v1/realtime/background_jobs']!.get!.responses['200'].content)).toEqual(['text/event-stream']);
    expect(doc.paths['/functions/v1/mcp']!.post!.security).toEqual([{ mcp: ['read'] }]);
    expect(doc.components.securitySchemes!.mcp.type).toBe('oauth2');
    expect(Object.keys(doc.paths['/functions/v1/oauth-authorize']!.get!.responses['200'].content)).toEqual(['text/html']);
    expect(doc.paths['/functions/v1/oauth-token']!.post!.responses['400'].content['application/json'].schema.properties.error.enum).toContain('invalid_grant');
  });

  it('takes management bodies from the zod schemas that validate them', () => {
    for (const r of ROUTES) {
      if (r.handler.kind !== 'admin') continue;
      const schema = (adminBodies as Record<string, z.ZodType>)[r.handler.action];
      if (!schema) continue;
      const body = deref(opOf(r).requestBody.content['application/json'].schema);
      expect(body).toEqual(jsonSchemaOf(schema));
    }
    const org = deref({ $ref: '#/components/schemas/AdminCreateOrgBody' });
    expect(org.properties.modules.items.enum).toEqual(['lab_equipment', 'analytics_qc', 'sample_intake']);
    expect(org.additionalProperties).toBe(false);
  });

  it('documents every management list with the contract’s page: limit 1 to 200 (default 50) and offset', () => {
    // GETs of the management API that are lists (not one resource, not the audit chain's verification)
    const lists = ROUTES.filter(
      (r) =>
        r.path.startsWith('/admin/') && r.method === 'GET' && !r.path.endsWith('/deliveries') && !r.path.endsWith('/audit/verify') && !/:[a-z_]+$/.test(r.path),
    );
    expect(lists.length).toBeGreaterThanOrEqual(10);
    for (const r of lists) {
      const op = opOf(r);
      const limit = op.parameters.find((p: any) => p.name === 'limit');
      const offset = op.parameters.find((p: any) => p.name === 'offset');
      expect([label(r), limit?.schema]).toEqual([label(r), expect.objectContaining({ minimum: 1, maximum: 200, default: 50 })]);
      expect([label(r), offset?.schema]).toEqual([label(r), expect.objectContaining({ minimum: 0, default: 0 })]);
      expect(deref(op.responses['200'].content['application/json'].schema).required).toEqual(['data', 'pagination']);
    }
    const users = opOf(ROUTES.find((r) => r.method === 'GET' && r.path === '/admin/v1/users')!);
    expect(users.parameters.map((p: any) => p.name)).toContain('email');
  });

  it('lists the subscribable events of the webhooks service in the subscription body', () => {
    const create = ROUTES.find((r) => r.method === 'POST' && r.path === '/admin/v1/orgs/:org_id/webhook-subscriptions')!;
    const body = deref(opOf(create).requestBody.content['application/json'].schema);
    expect(body.properties.events.items.enum).toEqual([...SUBSCRIBABLE_FILTERS]);
    expect(body.properties.events.items.enum).toEqual(
      expect.arrayContaining(['lab_order.created', 'lab_result.released', 'stock_item.*', 'environmental.*', '*']),
    );
    const patch = ROUTES.find((r) => r.method === 'PATCH' && r.path === '/admin/v1/orgs/:org_id/webhook-subscriptions/:id')!;
    expect(deref(opOf(patch).requestBody.content['application/json'].schema).properties.events.items.enum).toEqual([...SUBSCRIBABLE_FILTERS]);
  });

  it('answers the rotation 200, the redelivery 202 and a department in use 409', () => {
    const find = (method: string, path: string) => opOf(ROUTES.find((r) => r.method === method && r.path === path)!);
    expect(Object.keys(find('POST', '/admin/v1/orgs/:org_id/webhook-subscriptions/:id/rotate-secret').responses)).toContain('200');
    expect(Object.keys(find('POST', '/admin/v1/orgs/:org_id/inbound-endpoints/:id/rotate-secret').responses)).toContain('200');
    expect(Object.keys(find('POST', '/admin/v1/orgs/:org_id/webhook-subscriptions/:id/deliveries/:delivery_id/redeliver').responses)).toEqual(
      expect.arrayContaining(['202', '404', '409']),
    );
    expect(Object.keys(find('DELETE', '/admin/v1/orgs/:org_id/departments/:id').responses)).toEqual(expect.arrayContaining(['204', '404', '409']));
    expect(Object.keys(find('DELETE', '/admin/v1/orgs/:org_id/environmental-points/:point_id').responses)).toEqual(expect.arrayContaining(['204', '200']));
  });

  it("names the signing route's refusals: who may give which signature (docs/decisions/046-who-may-sign.md)", () => {
    const sign = opOf(ROUTES.find((r) => r.path === '/app/v1/experiments/:id/sign')!);
    const refused = sign.responses['403'];
    expect(deref(refused.content['application/json'].schema)).toBe(doc.components.schemas.Error);
    for (const code of ['invalid_password', 'forbidden', 'signer_is_author', 'signer_already_signed']) expect(refused.description).toContain(code);
    expect(refused.description).toContain('authorship by someone who is not the author of this version');
  });

  it('has the error, idempotency-conflict and envelope schemas', () => {
    const s = doc.components.schemas;
    expect(s.Error.required).toEqual(['error']);
    expect(s.IdempotencyConflict.properties.error).toEqual({ type: 'string', const: 'idempotency_key_conflict' });
    // every answer has its own schema: no untyped {data: object} envelope is left
    expect(s.List).toBeUndefined();
    expect(s.Item).toBeUndefined();
    expect(s.AuditList.required).toEqual(['data', 'next_cursor', 'count']);
  });

  it('documents the audit query from its zod schema', () => {
    const audit = ROUTES.find((r) => r.path === '/v1/audit')!;
    const limit = opOf(audit).parameters.find((p: any) => p.name === 'limit');
    expect(limit).toMatchObject({ in: 'query', schema: { maximum: 1000, default: 100 } });
  });
});

describe('OpenAPI webhooks', () => {
  const delivery = (doc as unknown as { webhooks: Record<string, Record<string, Operation>> }).webhooks.event!.post!;

  it('documents the delivery a subscriber receives, with its signature headers', () => {
    expect(paramNames(delivery, 'header')).toEqual([
      'X-Service-Event',
      'X-Service-Delivery',
      'X-Service-Signature',
      'webhook-id',
      'webhook-timestamp',
      'webhook-signature',
    ]);
    expect(delivery.requestBody.content['application/json'].schema.required).toEqual(['id', 'event', 'org_id', 'delivered_at', 'data']);
  });

  it('states the signing input, the tolerance and the rotation rule, as docs/webhooks.md does', () => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- read where used, like the checks below
    const { readFileSync } = require('node:fs') as typeof import('node:fs');
    const guide = readFileSync(`${__dirname}/../../../../../docs/webhooks.md`, 'utf8');
    const formula = 'v1 = hex(HMAC-SHA256(secret, "<t>.<raw body>"))';
    expect(guide).toContain(formula);
    expect(delivery.description).toContain(formula.replace(/^v1 = /, '`v1 = ').replace(/\)$/, ')`'));
    const standard = 'v1 = base64(HMAC-SHA256(key, "<webhook-id>.<webhook-timestamp>.<raw body>"))';
    expect(guide).toContain(standard);
    expect(delivery.description).toContain(`\`${standard}\``);
    for (const rule of ['300 seconds', 'two `v1` values', 'constant time', 'standard-webhooks', 'whsec_']) {
      expect(delivery.description).toContain(rule);
      expect(guide).toContain(rule);
    }
    const create = doc.paths['/admin/v1/orgs/{org_id}/webhook-subscriptions']!.post!;
    expect(create.responses['201'].description).toContain(delivery.description);
  });
});

/* eslint-disable @typescript-eslint/no-require-imports -- the validators and the services' schemas are loaded only by the checks that use them */
describe('OpenAPI job creation', () => {
  const { JOB_TYPES } = require('@lab/contracts') as typeof import('@lab/contracts');
  const { INPUTS } = require('@lab/jobs/job-types') as typeof import('@lab/jobs/job-types');
  const create = doc.paths['/v1/jobs']!.post!.requestBody.content['application/json'].schema;
  const check = (() => {
    const Ajv2020 = require('ajv/dist/2020').default as typeof import('ajv/dist/2020').default;
    const addFormats = require('ajv-formats') as typeof import('ajv-formats').default;
    // ajv's discriminator keyword does not take a mapping; oneOf over the job_type consts decides alone
    const ajv = new Ajv2020({ strict: false });
    addFormats(ajv);
    ajv.addSchema({ components: doc.components }, 'doc');
    return ajv.compile({ ...JSON.parse(JSON.stringify(create).replace(/"#\/components/g, '"doc#/components')) });
  })();
  const id = '0b7e5a8c-1f2d-4c3b-9a8e-7d6c5b4a3f21';

  it('has one body per job type, chosen by job_type', () => {
    expect(create.discriminator.propertyName).toBe('job_type');
    expect(Object.keys(create.discriminator.mapping).sort()).toEqual([...JOB_TYPES].sort());
  });

  it.each([
    [{ job_type: 'experiment_entry_pdf', input: { entry_id: id } }, true],
    [{ job_type: 'experiment_entry_pdf' }, false], // its input is required
    [{ job_type: 'experiment_entry_pdf', input: { entry_id: 'E-1' } }, false],
    [{ job_type: 'experiment_entry_pdf', input: { entry_id: id, extra: 1 } }, false],
    [{ job_type: 'box_layout_pdf' }, true],
    [{ job_type: 'box_layout_pdf', input: { rows: 27 } }, false],
    [{ job_type: 'audit_export', input: { from: '2026-01-01T00:00:00Z' } }, true],
    [{ job_type: 'audit_export', input: { from: 'yesterday' } }, false],
    [{ job_type: 'no_such_job' }, false],
  ])('%j: the document says valid=%s, as the jobs service does', (body, valid) => {
    expect(check(body)).toBe(valid);
    const known = (JOB_TYPES as readonly string[]).includes(body.job_type);
    const served = known && INPUTS[body.job_type as keyof typeof INPUTS].safeParse((body as { input?: unknown }).input ?? {}).success;
    expect(served).toBe(valid);
  });
});

describe('OpenAPI record bodies agree with the services that validate them', () => {
  const Ajv2020 = require('ajv/dist/2020').default as typeof import('ajv/dist/2020').default;
  const addFormats = require('ajv-formats') as typeof import('ajv-formats').default;
  const ajv = new Ajv2020({ strict: false });
  /* eslint-enable @typescript-eslint/no-require-imports */
  addFormats(ajv);
  ajv.addSchema({ components: doc.components }, 'doc');
  const compiled = (name: string) => ajv.compile({ $ref: `doc#/components/schemas/${name}` });
  const id = '0b7e5a8c-1f2d-4c3b-9a8e-7d6c5b4a3f21';

  it.each([
    [{ stock_item_id: id, movement_type: 'consume', quantity_delta: -2 }, true],
    [{ stock_item_id: id, movement_type: 'consume', quantity_delta: 2 }, false], // consumption takes stock out
    [{ stock_item_id: id, movement_type: 'restock', quantity_delta: -2 }, false],
    [{ stock_item_id: id, movement_type: 'adjustment', quantity_delta: -2 }, true],
    [{ stock_item_id: id, movement_type: 'transfer', quantity_delta: 5 }, true],
    [{ stock_item_id: id, movement_type: 'dispose', quantity_delta: 0 }, false],
    [{ stock_item_id: id, movement_type: 'adjustment', quantity_delta: 1, quantity_after: 3 }, false], // read-only
    [{ stock_item_id: 'S-1', movement_type: 'consume', quantity_delta: -1 }, false],
  ])('stock movement %j: valid=%s in the document and in the inventory service', (body, valid) => {
    expect(compiled('StockMovementCreate')(body)).toBe(valid);
    expect(INVENTORY_RECORDS['stock-movements'].create.safeParse(body).success).toBe(valid);
  });

  it.each([
    [{ name: 'serum 1' }, true],
    [{ name: '' }, false],
    [{ name: 'x', id }, false], // read-only fields are refused
    [{ name: 'x', created_at: '2026-01-01T00:00:00Z' }, false],
    [{ name: 'x', type: null, owner_id: id }, true],
    [{ name: 'x', owner_id: 'me' }, false],
  ])('sample %j: valid=%s in the document and in the notebook service', (body, valid) => {
    expect(compiled('SampleCreate')(body)).toBe(valid);
    expect(NOTEBOOK_RECORDS.samples.create.safeParse(body).success).toBe(valid);
  });
});
