import { randomUUID } from 'node:crypto';
import { startStack, type Stack } from '@lab/testing';
import { call } from '../../gateway/test/http';

let stack: Stack;
let writeKey: string;
let adminKey: string;

const api = (method: string, path: string, token: string, body?: unknown, headers?: Record<string, string>) =>
  call(stack.url, method, path, { token, body, headers });

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'audit', 'inventory'] });
  const orgId = (await stack.admin.createOrg()).id;
  writeKey = (await stack.admin.createApiKey(orgId, { scopes: ['write'] })).token;
  adminKey = (await stack.admin.createApiKey(orgId, { scopes: ['admin'] })).token;
});

afterAll(async () => {
  await stack?.stop();
});

async function stockItem(quantity: number) {
  const reagent = await api('POST', '/v1/reagents', writeKey, { name: 'Acetone', signal_word: 'danger', molecular_weight: 58.08 });
  expect(reagent.status).toBe(201);
  expect(reagent.body.data).toMatchObject({ name: 'Acetone', signal_word: 'danger', molecular_weight: 58.08 });
  const item = await api('POST', '/v1/stock-items', writeKey, { catalog_id: reagent.body.data.id, quantity, unit: 'mL' });
  expect(item.status).toBe(201);
  return item.body.data as { id: string; quantity: number };
}

describe('inventory through the gateway', () => {
  it('creates and lists reagents, stock items, movements and inventory runs', async () => {
    const item = await stockItem(100);
    const moved = await api('POST', '/v1/stock-movements', writeKey, { stock_item_id: item.id, movement_type: 'consume', quantity_delta: -2.5 });
    expect(moved.status).toBe(201);
    expect(moved.body.data).toMatchObject({ stock_item_id: item.id, quantity_delta: -2.5, quantity_after: 97.5, unit: 'mL' });

    const movements = await api('GET', `/v1/stock-movements?stock_item_id=${item.id}`, writeKey);
    expect(movements.status).toBe(200);
    expect(movements.body).toEqual({ data: [moved.body.data], pagination: { limit: 50, offset: 0, total: 1 } });
    expect((await api('GET', `/v1/stock-items/${item.id}`, writeKey)).body.data.quantity).toBe(97.5);
    const reagents = await api('GET', '/v1/reagents?signal_word=danger', writeKey);
    expect(reagents.status).toBe(200);
    expect(reagents.body.pagination.total).toBeGreaterThanOrEqual(1);

    const run = await api('POST', '/v1/inventories', writeKey, { name: 'Q2' });
    expect(run.status).toBe(201);
    expect(run.body.data.status).toBe('open');
    const closed = await api('PATCH', `/v1/inventories/${run.body.data.id}`, writeKey, { status: 'closed' });
    expect(closed.status).toBe(200);
    expect(closed.body.data.closed_at).toEqual(expect.any(String));
    const reopen = await api('PATCH', `/v1/inventories/${run.body.data.id}`, writeKey, { status: 'open' });
    expect(reopen.status).toBe(409);
    expect(reopen.body.error.code).toBe('invalid_transition');
  });

  it('answers 400 for a PATCH of a stock item quantity and 409 insufficient_stock for too large a consumption', async () => {
    const item = await stockItem(1);
    const patched = await api('PATCH', `/v1/stock-items/${item.id}`, writeKey, { quantity: 5 });
    expect(patched.status).toBe(400);
    expect(patched.body.error).toMatchObject({ code: 'validation_failed', details: { field: 'quantity' } });
    const tooMuch = await api('POST', '/v1/stock-movements', writeKey, { stock_item_id: item.id, movement_type: 'consume', quantity_delta: -2 });
    expect(tooMuch.status).toBe(409);
    expect(tooMuch.body.error).toMatchObject({ code: 'insufficient_stock', details: { available: 1, requested: 2 } });
    expect((await api('GET', `/v1/stock-items/${item.id}`, writeKey)).body.data.quantity).toBe(1);
  });

  it('refuses a number past the double range (1e309) instead of storing null, and writes nothing', async () => {
    const count = async () => (await api('GET', '/v1/reagents?limit=1', writeKey)).body.pagination.total as number;
    const before = await count();
    const r = await api('POST', '/v1/reagents', writeKey, '{"name":"Huge","molecular_weight":1e309}');
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ code: 'validation_failed', details: { field: 'molecular_weight' } });
    const q = await api('POST', '/v1/stock-movements', writeKey, `{"stock_item_id":"${randomUUID()}","movement_type":"restock","quantity_delta":-1e400}`);
    expect(q.status).toBe(400);
    expect(q.body.error.details.field).toBe('quantity_delta');
    expect(await count()).toBe(before);
  });

  it('has no update route for stock movements', async () => {
    const item = await stockItem(10);
    const moved = await api('POST', '/v1/stock-movements', writeKey, { stock_item_id: item.id, movement_type: 'restock', quantity_delta: 5 });
    for (const method of ['PATCH', 'PUT']) {
      const r = await api(method, `/v1/stock-movements/${moved.body.data.id}`, adminKey, { reason: 'edited' });
      expect(r.status).toBe(405);
    }
    expect((await api('GET', `/v1/stock-movements/${moved.body.data.id}`, writeKey)).body.data).toEqual(moved.body.data);
  });

  it('replays an idempotent movement POST without moving stock twice', async () => {
    const item = await stockItem(10);
    const key = `move-${randomUUID()}`;
    const body = { stock_item_id: item.id, movement_type: 'consume', quantity_delta: -3, reason: 'assay' };
    const first = await api('POST', '/v1/stock-movements', writeKey, body, { 'idempotency-key': key });
    expect(first.status).toBe(201);
    const again = await api('POST', '/v1/stock-movements', writeKey, body, { 'idempotency-key': key });
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replay')).toBe('true');
    expect(again.text).toBe(first.text);
    const movements = await api('GET', `/v1/stock-movements?stock_item_id=${item.id}`, writeKey);
    expect(movements.body.pagination.total).toBe(1);
    expect((await api('GET', `/v1/stock-items/${item.id}`, writeKey)).body.data.quantity).toBe(7);
  });

  it('lets only an administrator delete a movement, which reverses it', async () => {
    const item = await stockItem(10);
    const moved = await api('POST', '/v1/stock-movements', writeKey, { stock_item_id: item.id, movement_type: 'consume', quantity_delta: -4 });
    expect((await api('DELETE', `/v1/stock-movements/${moved.body.data.id}`, writeKey)).status).toBe(403);
    expect((await api('DELETE', `/v1/stock-movements/${moved.body.data.id}`, adminKey)).status).toBe(204);
    expect((await api('GET', `/v1/stock-items/${item.id}`, writeKey)).body.data.quantity).toBe(10);
  });

  it('moves stock under X-Test-Mode: the header is a dry run for generic CRUD only, and movements have their own section', async () => {
    const testMode = { 'x-test-mode': 'true' };
    const item = await stockItem(10);
    const moved = await api('POST', '/v1/stock-movements', writeKey, { stock_item_id: item.id, movement_type: 'consume', quantity_delta: -3 }, testMode);
    expect(moved.status).toBe(201);
    expect(moved.body.data).toMatchObject({ stock_item_id: item.id, quantity_delta: -3, quantity_after: 7 });
    expect((await api('GET', `/v1/stock-items/${item.id}`, writeKey)).body.data.quantity).toBe(7);
    expect((await api('DELETE', `/v1/stock-movements/${moved.body.data.id}`, adminKey, undefined, testMode)).status).toBe(204);
    expect((await api('GET', `/v1/stock-items/${item.id}`, writeKey)).body.data.quantity).toBe(10);
    // on a generic CRUD resource of the same service it still is one
    const dry = await api('POST', '/v1/stock-items', writeKey, { catalog_id: item.id, quantity: 1, unit: 'mL' }, testMode);
    expect(dry.status).toBe(200);
    expect(dry.body.data.test_mode).toBe(true);
  });
});
