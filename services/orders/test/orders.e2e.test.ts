import { randomUUID } from 'node:crypto';
import { startStack, tapEvents, type EventTap, type Stack } from '@lab/testing';
import { call, eventually } from '../../gateway/test/http';

let stack: Stack;
let tap: EventTap | undefined;
/** the tap's events as they arrive (its array, filled in place) */
let events: { type: string; data: any }[] = [];
let writeKey: string;
let adminKey: string;
let otherOrgKey: string;
let noModuleKey: string;

const api = (method: string, path: string, token: string, body?: unknown, headers?: Record<string, string>) =>
  call(stack.url, method, path, { token, body, headers });

// Small caps so the capping is visible with a handful of rows (read when the service registers).
const CAP_ENV = { ORDERS_RESULTS_MAX_ROWS: '3', ORDERS_RESULTS_MAX_SAMPLES: '2' };

beforeAll(async () => {
  Object.assign(process.env, CAP_ENV);
  stack = await startStack({ services: ['identity', 'audit', 'notebook', 'orders'] });
  const { admin } = stack;
  const org = await admin.createOrg({ modules: ['sample_intake'] });
  const other = await admin.createOrg({ modules: ['sample_intake'] });
  const bare = await admin.createOrg();
  writeKey = (await admin.createApiKey(org.id, { scopes: ['write'] })).token;
  adminKey = (await admin.createApiKey(org.id, { scopes: ['admin'] })).token;
  otherOrgKey = (await admin.createApiKey(other.id, { scopes: ['admin'] })).token;
  noModuleKey = (await admin.createApiKey(bare.id, { scopes: ['admin'] })).token;
  tap = await tapEvents(stack.bus, stack.exchange, ['sample.created', 'lab_order.#', 'lab_result.#']);
  events = tap.received;
});

afterAll(async () => {
  await tap?.close();
  await stack?.stop();
  // eslint-disable-next-line @typescript-eslint/no-dynamic-delete -- delete is how a variable leaves the environment
  for (const k of Object.keys(CAP_ENV)) delete process.env[k];
});

const orderBody = (samples: number, over: Record<string, unknown> = {}) => ({
  external_order_number: `LIS-${randomUUID()}`,
  requester: { name: 'Dr. Ward', organisation: 'Ward 7' },
  priority: 'stat',
  samples: Array.from({ length: samples }, (_, i) => ({ name: `tube ${randomUUID()}`, type: 'serum', external_sample_id: `T${i}` })),
  ...over,
});

async function newOrder(token: string, samples: number) {
  const r = await api('POST', '/v1/lab-orders', token, orderBody(samples));
  expect(r.status).toBe(201);
  return r.body.data as { id: string; external_order_number: string; samples: { sample_id: string; name: string }[] };
}

describe('module sample_intake', () => {
  it('answers 403 module_not_enabled on every lab-order route without the module', async () => {
    const id = randomUUID();
    const paths: [string, string][] = [
      ['GET', '/v1/lab-orders'],
      ['POST', '/v1/lab-orders'],
      ['GET', `/v1/lab-orders/${id}`],
      ['POST', `/v1/lab-orders/${id}/results`],
      ['POST', `/v1/lab-orders/${id}/results/${id}/release`],
      ['GET', '/v1/lab-results'],
    ];
    for (const [method, path] of paths) {
      const r = await api(method, path, noModuleKey, method === 'POST' ? orderBody(1) : undefined);
      expect([method, path, r.status, r.body.error.code]).toEqual([method, path, 403, 'module_not_enabled']);
    }
  });
});

describe('lab orders through the gateway', () => {
  it('creates an order whose samples are notebook samples, one sample.created each, and lab_order.created', async () => {
    const order = await newOrder(writeKey, 2);
    expect(order).toMatchObject({ status: 'received', priority: 'stat', sample_count: 2, requester: { name: 'Dr. Ward', organisation: 'Ward 7' } });
    for (const s of order.samples) {
      const sample = await api('GET', `/v1/samples/${s.sample_id}`, writeKey);
      expect(sample.status).toBe(200);
      expect(sample.body.data).toMatchObject({ id: s.sample_id, name: s.name, type: 'serum' });
      const listed = await api('GET', `/v1/samples?name=${encodeURIComponent(s.name)}`, writeKey);
      expect(listed.body.pagination.total).toBe(1);
    }
    const ids = order.samples.map((s) => s.sample_id);
    await eventually(async () => (events.filter((e) => e.type === 'sample.created' && ids.includes(e.data.id)).length === 2 ? true : undefined));
    await eventually(async () => events.find((e) => e.type === 'lab_order.created' && e.data.id === order.id));
    for (const id of ids) expect(events.filter((e) => e.type === 'sample.created' && e.data.id === id)).toHaveLength(1);

    const got = await api('GET', `/v1/lab-orders/${order.id}`, writeKey);
    expect(got.status).toBe(200);
    expect(got.body.data).toEqual(order);
    const list = await api('GET', `/v1/lab-orders?external_order_number=${order.external_order_number}`, writeKey);
    expect(list.body).toMatchObject({ data: [{ id: order.id, sample_count: 2 }], pagination: { limit: 50, offset: 0, total: 1 } });
  });

  it('answers 409 duplicate_order for a number already used, 400 for a bad body, 404 for an unknown or non-UUID id', async () => {
    const body = orderBody(1);
    expect((await api('POST', '/v1/lab-orders', writeKey, body)).status).toBe(201);
    const dup = await api('POST', '/v1/lab-orders', writeKey, { ...body, samples: [{ name: 'other' }] });
    expect([dup.status, dup.body.error.code]).toEqual([409, 'duplicate_order']);
    const bad = await api('POST', '/v1/lab-orders', writeKey, { ...orderBody(1), samples: [] });
    expect([bad.status, bad.body.error.code, bad.body.error.details.field]).toEqual([400, 'validation_failed', 'samples']);
    expect((await api('GET', `/v1/lab-orders/${randomUUID()}`, writeKey)).status).toBe(404);
    expect((await api('GET', '/v1/lab-orders/not-a-uuid', writeKey)).status).toBe(404);
    expect((await api('GET', '/v1/lab-orders?limit=501', writeKey)).status).toBe(400);
  });

  it('replays an order sent again with the same Idempotency-Key without creating anything twice', async () => {
    const body = orderBody(2);
    const headers = { 'Idempotency-Key': `order-${randomUUID()}` };
    const first = await api('POST', '/v1/lab-orders', writeKey, body, headers);
    const again = await api('POST', '/v1/lab-orders', writeKey, body, headers);
    expect(first.status).toBe(201);
    expect([again.status, again.headers.get('idempotent-replay'), again.text]).toEqual([201, 'true', first.text]);
    const orders = await api('GET', `/v1/lab-orders?external_order_number=${body.external_order_number}`, writeKey);
    expect(orders.body.pagination.total).toBe(1);
    for (const s of body.samples) {
      expect((await api('GET', `/v1/samples?name=${encodeURIComponent(s.name)}`, writeKey)).body.pagination.total).toBe(1);
    }
  });

  it('hides orders and results of another organisation (404)', async () => {
    const order = await newOrder(writeKey, 1);
    const recorded = await api('POST', `/v1/lab-orders/${order.id}/results`, writeKey, { sample_id: order.samples[0]!.sample_id, analyte: 'K', value: 4.1 });
    expect(recorded.status).toBe(201);
    expect((await api('GET', `/v1/lab-orders/${order.id}`, otherOrgKey)).status).toBe(404);
    const foreignResult = await api('POST', `/v1/lab-orders/${order.id}/results`, otherOrgKey, {
      sample_id: order.samples[0]!.sample_id,
      analyte: 'K',
      value: 1,
    });
    expect(foreignResult.status).toBe(404);
    expect((await api('POST', `/v1/lab-orders/${order.id}/results/${recorded.body.data.id}/release`, otherOrgKey)).status).toBe(404);
    expect((await api('GET', `/v1/lab-orders?external_order_number=${order.external_order_number}`, otherOrgKey)).body.pagination.total).toBe(0);
    expect((await api('POST', `/v1/lab-orders/${order.id}/results/${recorded.body.data.id}/release`, adminKey)).status).toBe(200);
    expect((await api('GET', `/v1/lab-results?order_id=${order.id}`, otherOrgKey)).body.data).toEqual([]);
  });
});

describe('lab results', () => {
  it('records results, releases them (admin scope for a key without a user) and lists only released ones', async () => {
    const order = await newOrder(writeKey, 2);
    const [s0, s1] = order.samples;
    const r1 = await api('POST', `/v1/lab-orders/${order.id}/results`, writeKey, {
      sample_id: s0!.sample_id,
      analyte: 'Na',
      value: 140,
      unit: 'mmol/L',
      reference_range: '135-145',
    });
    const r2 = await api('POST', `/v1/lab-orders/${order.id}/results`, writeKey, { sample_id: s1!.sample_id, analyte: 'culture', value: 'negative' });
    expect([r1.status, r2.status]).toEqual([201, 201]);
    expect(r1.body.data).toMatchObject({ status: 'recorded', value: 140, released_at: null });
    const foreignSample = await api('POST', `/v1/lab-orders/${order.id}/results`, writeKey, { sample_id: randomUUID(), analyte: 'Na', value: 1 });
    expect([foreignSample.status, foreignSample.body.error.details.field]).toEqual([400, 'sample_id']);

    expect((await api('GET', `/v1/lab-results?order_id=${order.id}`, writeKey)).body.data).toEqual([]);
    const refused = await api('POST', `/v1/lab-orders/${order.id}/results/${r1.body.data.id}/release`, writeKey);
    expect(refused.status).toBe(403);
    const released = await api('POST', `/v1/lab-orders/${order.id}/results/${r1.body.data.id}/release`, adminKey);
    expect(released.status).toBe(200);
    expect(released.body.data).toMatchObject({ id: r1.body.data.id, status: 'released', released_at: expect.any(String) });
    const twice = await api('POST', `/v1/lab-orders/${order.id}/results/${r1.body.data.id}/release`, adminKey);
    expect([twice.status, twice.body.error.code]).toEqual([409, 'already_released']);

    const listed = await api('GET', `/v1/lab-results?order_id=${order.id}`, writeKey);
    expect(listed.status).toBe(200);
    expect(listed.body).toEqual({
      data: [released.body.data],
      pagination: { limit: 3, offset: 0, total: 1, capped: false, sample_lookup_capped: false },
    });
    expect(listed.headers.get('warning')).toBeNull();
    await eventually(async () => events.find((e) => e.type === 'lab_result.released' && e.data.id === r1.body.data.id));
  });

  it('caps the rows and the sample lookup and says so in the Warning header and pagination', async () => {
    const org = await stack.admin.createOrg({ modules: ['sample_intake'] });
    const key = (await stack.admin.createApiKey(org.id, { scopes: ['admin'] })).token;
    const order = await newOrder(key, 3);
    for (const s of order.samples) {
      for (const analyte of ['A', 'B']) {
        const r = await api('POST', `/v1/lab-orders/${order.id}/results`, key, { sample_id: s.sample_id, analyte, value: 1 });
        expect((await api('POST', `/v1/lab-orders/${order.id}/results/${r.body.data.id}/release`, key)).status).toBe(200);
      }
    }
    const all = await api('GET', '/v1/lab-results', key);
    expect(all.status).toBe(200);
    expect(all.body.data).toHaveLength(3);
    expect(all.body.pagination).toEqual({ limit: 3, offset: 0, total: 6, capped: true, sample_lookup_capped: false });
    expect(all.headers.get('warning')).toBe('299 - "lab results capped at 3 rows"');

    const byOrder = await api('GET', `/v1/lab-results?external_order_number=${order.external_order_number}`, key);
    expect(byOrder.body.pagination).toEqual({ limit: 3, offset: 0, total: 4, capped: true, sample_lookup_capped: true });
    expect(byOrder.headers.get('warning')).toBe('299 - "lab results capped at 3 rows", 299 - "lab results sample lookup capped at 2 samples"');

    const page = await api('GET', '/v1/lab-results?limit=2&offset=4', key);
    expect([page.body.data.length, page.body.pagination.capped, page.headers.get('warning')]).toEqual([2, false, null]);
    expect((await api('GET', '/v1/lab-results?limit=4', key)).status).toBe(400);
  });
});
