/**
 * Cross-organisation probing: one record of every kind in organisation A, then
 * organisation B's credentials on every route of the OpenAPI document that
 * takes an id, with A's ids. Each answers 404 (never A's data, never a change),
 * and B's lists never mention an id of A.
 */
import { randomUUID } from 'node:crypto';
import { startStack, type Stack } from '@lab/testing';
import { call, eventually } from './http';

const ALL_SERVICES = ['identity', 'notebook', 'audit', 'inventory', 'equipment', 'webhooks', 'telemetry', 'orders', 'notifications', 'jobs'];
const MODULES = ['lab_equipment', 'analytics_qc', 'sample_intake'];
const PASSWORD = 'correct horse battery staple 2';

let stack: Stack;
let keyA: string;
let keyB: string;
let sessionB: string;
let orgA: string;
let orgB: string;
let doc: any;
/** A's ids by kind */
const A: Record<string, string> = {};
/** a valid body per kind, so a 404 is not masked by a 400 */
const bodies: Record<string, unknown> = {};

const api = (method: string, path: string, token: string, body?: unknown, headers?: Record<string, string>) =>
  call(stack.url, method, path, { token, body, headers });

async function created(kind: string, method: string, path: string, body: unknown): Promise<any> {
  const r = await api(method, path, keyA, body);
  if (![200, 201, 202].includes(r.status)) throw new Error(`${method} ${path} answered ${r.status}: ${r.text}`);
  // batch answers carry their ids in a list
  const id = r.body?.data?.id ?? r.body?.data?.readings?.[0]?.id ?? r.body?.data?.notification_ids?.[0];
  if (id) A[kind] = id;
  bodies[kind] = body;
  return r.body.data;
}

beforeAll(async () => {
  stack = await startStack({ services: ALL_SERVICES });
  const { admin } = stack;
  orgA = (await admin.createOrg({ modules: MODULES })).id;
  orgB = (await admin.createOrg({ modules: MODULES })).id;
  const userA = await admin.createUser({ password: PASSWORD });
  const userB = await admin.createUser({ password: PASSWORD });
  await admin.putMember(orgA, userA.id, 'admin');
  await admin.putMember(orgB, userB.id, 'admin');
  A.user = userA.id;
  keyA = (await admin.createApiKey(orgA, { scopes: ['*'], user_id: userA.id })).token;
  keyB = (await admin.createApiKey(orgB, { scopes: ['*'], user_id: userB.id })).token;
  const login = await call(stack.url, 'POST', '/auth/v1/token', { body: { grant_type: 'password', email: userB.email, password: PASSWORD } });
  sessionB = login.body.access_token;

  await created('projects', 'POST', '/v1/projects', { name: 'A project' });
  await created('experiments', 'POST', '/v1/experiments', { title: 'A experiment' });
  await created('samples', 'POST', '/v1/samples', { name: 'A sample' });
  await created('reagents', 'POST', '/v1/reagents', { name: 'Acetone' });
  await created('inventories', 'POST', '/v1/inventories', { name: 'A inventory' });
  await created('stock-items', 'POST', '/v1/stock-items', { catalog_id: A.reagents, quantity: 10, unit: 'mL' });
  await created('stock-movements', 'POST', '/v1/stock-movements', { stock_item_id: A['stock-items'], movement_type: 'consume', quantity_delta: -1 });
  await created('equipment', 'POST', '/v1/equipment', { name: 'A balance' });
  const eq = A.equipment;
  await created('usage', 'POST', `/v1/equipment/${eq}/usage`, { purpose: 'weigh' });
  await created('maintenance', 'POST', `/v1/equipment/${eq}/maintenance`, { maintenance_type: 'inspection' });
  await created('calibrations', 'POST', `/v1/equipment/${eq}/calibrations`, { standard: 'A' });
  await created('qualifications', 'POST', `/v1/equipment/${eq}/qualifications`, { phase: 'IQ' });
  await created('remote', 'PUT', `/v1/equipment/${eq}/remote`, { url: 'https://remote.example.org' });
  await created('devices', 'POST', '/v1/devices', { name: 'A device', identifier: `dev-${randomUUID()}` });
  await created('results', 'POST', '/v1/results', { device_id: A.devices, values: [{ name: 'mass', value: 1.25, unit: 'g' }] });
  await created('connectors', 'POST', '/v1/connectors', {
    name: `pc-${randomUUID()}`,
    version: '1.0',
    devices: [{ identifier: `c-${randomUUID()}`, name: 'X' }],
  });
  const point = await admin.call<any>(
    'POST',
    `/orgs/${orgA}/environmental-points`,
    { parameter: 'temperature', unit: '°C', external_code: 'A-T1', limit_max: 8 },
    201,
  );
  A.point = point.id;
  bodies.point = { unit: 'K' };
  await created('reading', 'POST', '/v1/environmental-readings', { external_code: 'A-T1', value: 4 });
  const order = await created('lab-orders', 'POST', '/v1/lab-orders', {
    external_order_number: `LIS-${randomUUID()}`,
    requester: { name: 'Dr. Ward', organisation: 'Ward 7' },
    priority: 'stat',
    samples: [{ name: `tube ${randomUUID()}`, type: 'serum', external_sample_id: 'T0' }],
  });
  A.orderSample = order.samples[0].sample_id;
  await created('lab-results', 'POST', `/v1/lab-orders/${A['lab-orders']}/results`, { sample_id: A.orderSample, analyte: 'K', value: 4.1 });
  await created('notifications', 'POST', '/v1/notifications', { title: 'A note', user_id: userA.id });
  await created('jobs', 'POST', '/v1/jobs', { job_type: 'experiment_entry_pdf', input: { entry_id: A.experiments } });
  const sub = await admin.call<any>('POST', `/orgs/${orgA}/webhook-subscriptions`, { url: 'https://hooks.example.org/a', events: ['*'] }, 201);
  A['webhook-subscriptions'] = sub.id;
  // an event after the subscription, so that it has a delivery to name
  await created('samples-delivered', 'POST', '/v1/samples', { name: 'A sample for the subscription' });
  A.delivery = await eventually(async () => {
    const d = await call(stack.url, 'GET', `/admin/v1/orgs/${orgA}/webhook-subscriptions/${sub.id}/deliveries`, { token: stack.operatorToken });
    return d.body.data[0]?.id as string | undefined;
  });
  A['inbound-endpoints'] = (await admin.call<any>('POST', `/orgs/${orgA}/inbound-endpoints`, {}, 201)).id;
  A.department = (await admin.call<any>('POST', `/orgs/${orgA}/departments`, { name: 'A chemistry' }, 201)).id;
  await created('calendar-feeds', 'POST', '/v1/calendar-feeds', { equipment_id: A.equipment });
  const keyInfo = await admin.createApiKey(orgA, { scopes: ['read'] });
  A.token = keyInfo.id;
  doc = (await call(stack.url, 'GET', '/v1/openapi.json')).body;
}, 120_000);

afterAll(async () => {
  await stack?.stop();
});

/** The id of A's record for one path parameter of a route template. */
function idFor(template: string, param: string): string | undefined {
  const segs = template.split('/').filter(Boolean);
  if (param === 'org_id') return orgB;
  if (param === 'sub_id') return A[segs[3]];
  if (param === 'result_id') return A['lab-results'];
  if (param === 'point_id') return A.point;
  if (param === 'user_id') return A.user;
  if (param === 'token_id') return A.token;
  if (param === 'delivery_id') return A.delivery;
  if (param === 'id') {
    if (template.includes('webhook-subscriptions')) return A['webhook-subscriptions'];
    if (template.includes('inbound-endpoints')) return A['inbound-endpoints'];
    if (template.includes('/departments/')) return A.department;
    return A[segs[0] === 'v1' ? segs[1] : segs[2]];
  }
  return undefined;
}

function bodyFor(method: string, template: string): unknown {
  if (method === 'GET' || method === 'DELETE') return undefined;
  const segs = template.split('/').filter(Boolean);
  if (template.endsWith('/release') || template.endsWith('/rotate-secret') || template.endsWith('/redeliver')) return undefined;
  if (template.includes('webhook-subscriptions/{id}') || template.includes('inbound-endpoints/{id}')) return { active: false };
  if (template.endsWith('/sign')) return { password: PASSWORD };
  if (template.endsWith('/amendments')) return { reason: 'probing another organisation' };
  if (template.startsWith('/v1/lab-orders/{id}/results')) return { sample_id: A.orderSample, analyte: 'Na', value: 140 };
  if (template.startsWith('/admin/')) return segs.includes('environmental-points') ? bodies.point : { role: 'viewer' };
  if (template === '/v1/notifications/{id}') return { read: true };
  // quantity changes only through movements
  if (template === '/v1/stock-items/{id}') return { catalog_id: A.reagents, unit: 'L' };
  if (segs[1] === 'equipment' && segs.length >= 4) return bodies[segs[3]] ?? {};
  return bodies[segs[1]] ?? {};
}

const operations = (): { method: string; path: string; op: any }[] =>
  Object.entries(doc.paths as Record<string, Record<string, any>>).flatMap(([path, byMethod]) =>
    Object.entries(byMethod).map(([m, op]) => ({ method: m.toUpperCase(), path, op })),
  );
const kinds = (op: any): string[] => (op.security ?? []).flatMap((s: any) => Object.keys(s));

describe('cross-organisation probing', () => {
  it('created one record of every kind in organisation A', () => {
    const expected = [
      'projects',
      'experiments',
      'samples',
      'reagents',
      'inventories',
      'stock-items',
      'stock-movements',
      'equipment',
      'usage',
      'maintenance',
      'calibrations',
      'qualifications',
      'remote',
      'devices',
      'results',
      'connectors',
      'point',
      'reading',
      'lab-orders',
      'lab-results',
      'notifications',
      'jobs',
      'webhook-subscriptions',
      'delivery',
      'inbound-endpoints',
      'department',
      'calendar-feeds',
    ];
    expect(expected.filter((k) => !A[k])).toEqual([]);
  });

  it("answers 404 on every route that takes an id when B's credentials name A's records", async () => {
    const answers: string[] = [];
    let probed = 0;
    for (const { method, path, op } of operations()) {
      const params = [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]);
      // a route whose only ids are B's own organisation (or a user) names nothing of A
      if (!params.some((p) => p !== 'org_id') || path.startsWith('/admin/v1/users/') || path.startsWith('/functions/') || path.startsWith('/.well-known/'))
        continue;
      // the operator may revoke any token, add any user to B, manage OAuth clients and replay any dead letter: none is org-scoped
      if (
        path.startsWith('/admin/v1/tokens/') ||
        path.startsWith('/admin/v1/oauth-clients/') ||
        path.startsWith('/admin/v1/dead-letters/') ||
        // a calendar feed's URL token is its own credential, read without a header: it names no id of A to B
        path.startsWith('/v1/calendar/{') ||
        (method === 'PUT' && path.endsWith('/members/{user_id}'))
      ) {
        continue;
      }
      const url = path.replace(/\{([^}]+)\}/g, (_, p: string) => idFor(path, p) ?? `missing-${p}`);
      expect(url).not.toContain('missing-');
      const k = kinds(op);
      const token = k.includes('operator') ? stack.operatorToken : k.includes('session') ? sessionB : keyB;
      const headers = k.includes('session') ? { 'x-org-id': orgB } : undefined;
      const r = await api(method, url, token, bodyFor(method, path), headers);
      probed++;
      if (r.status !== 404) answers.push(`${method} ${path} -> ${r.status} ${r.text.slice(0, 200)}`);
      // control: the same read with A's own key finds the record, so the 404 above is about the organisation
      if (method === 'GET' && k.includes('bearer') && !path.endsWith('/artifact')) {
        const own = await api(method, url, keyA);
        if (own.status !== 200) answers.push(`control ${method} ${path} with A's key -> ${own.status} ${own.text.slice(0, 200)}`);
      }
    }
    expect(answers).toEqual([]);
    expect(probed).toBeGreaterThan(40);
  });

  it("never lists A's records to B", async () => {
    // A's records are all still there (the probes above changed nothing)
    expect((await api('GET', `/v1/samples/${A.samples}`, keyA)).status).toBe(200);
    expect((await api('GET', `/v1/equipment/${A.equipment}/remote`, keyA)).status).toBe(200);
    // wait until A's audit trail exists, so the audit list is a real probe
    await eventually(async () => ((await api('GET', '/v1/audit', keyA)).text.includes(A.samples) ? true : undefined));
    const leaks: string[] = [];
    let lists = 0;
    for (const { method, path, op } of operations()) {
      if (method !== 'GET' || path.includes('{') || !kinds(op).includes('bearer') || path.startsWith('/v1/realtime/')) continue;
      const r = await api('GET', `${path}?limit=1000`, keyB);
      const plain = r.status === 400 ? await api('GET', path, keyB) : r;
      expect([path, plain.status]).toEqual([path, 200]);
      lists++;
      for (const [kind, id] of Object.entries(A)) if (plain.text.includes(id)) leaks.push(`${path} shows A's ${kind} ${id}`);
    }
    // control: the same search finds A's records in A's own lists
    expect((await api('GET', '/v1/samples', keyA)).text).toContain(A.samples);
    const deliveries = await call(stack.url, 'GET', `/admin/v1/orgs/${orgB}/webhook-subscriptions/${A['webhook-subscriptions']}/deliveries`, {
      token: stack.operatorToken,
    });
    expect(deliveries.status).toBe(404);
    expect(leaks).toEqual([]);
    expect(lists).toBeGreaterThan(15);
  });
});
