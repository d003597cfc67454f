import { startStack, type Stack } from '@lab/testing';
import { call, eventually } from './http';

let stack: Stack;
let auditor: string;
let writer: string;

const get = (path: string, token = auditor) => call(stack.url, 'GET', path, { token });

beforeAll(async () => {
  stack = await startStack();
  const org = await stack.admin.createOrg();
  auditor = (await stack.admin.createApiKey(org.id, { scopes: ['audit:read'] })).token;
  writer = (await stack.admin.createApiKey(org.id, { scopes: ['write'] })).token;
});

afterAll(async () => {
  await stack?.stop();
});

it('pages the audit log with the cursor, without gap or duplicate', async () => {
  for (let i = 0; i < 7; i++) {
    expect((await call(stack.url, 'POST', '/v1/samples', { token: writer, body: { name: `a${i}` } })).status).toBe(201);
  }
  // Every write of this org is audited: the org and its two keys (identity) and the
  // seven samples (notebook). They arrive through two outboxes in any order, so
  // wait for all ten before paging.
  const all = await eventually(async () => {
    const r = await get('/v1/audit?limit=1000');
    return r.body.count >= 10 ? r.body : undefined;
  });
  expect(all.count).toBe(10);
  expect(all.data.filter((x: { resource: string }) => x.resource === 'sample')).toHaveLength(7);
  expect(all.data).toHaveLength(all.count);

  const seen: string[] = [];
  let path = '/v1/audit?limit=3';
  for (let page = 0; page < 10; page++) {
    const r = await get(path);
    expect(r.status).toBe(200);
    expect(r.body.count).toBe(r.body.data.length);
    seen.push(...r.body.data.map((x: { id: string }) => x.id));
    if (!r.body.next_cursor) break;
    const { since_created_at, since_id } = r.body.next_cursor;
    path = `/v1/audit?limit=3&since_created_at=${encodeURIComponent(since_created_at)}&since_id=${since_id}`;
  }
  expect(seen).toEqual(all.data.map((x: { id: string }) => x.id));
  expect(new Set(seen).size).toBe(seen.length);
});

it.each([
  ['limit=0'],
  ['limit=1001'],
  ['limit=abc'],
  ['since_created_at=2024-01-01T00:00:00Z'],
  ['since_id=0190a0c8-0000-7000-8000-000000000001'],
  ['from=yesterday'],
  ['to=2024-13-45T00:00:00Z'],
])('answers 400 validation_failed for %s', async (q) => {
  const r = await get(`/v1/audit?${q}`);
  expect(r.status).toBe(400);
  expect(r.body.error.code).toBe('validation_failed');
});

it('accepts a from/to window', async () => {
  const r = await get(`/v1/audit?from=${encodeURIComponent('2000-01-01T00:00:00Z')}&to=${encodeURIComponent('2000-01-02T00:00:00+02:00')}`);
  expect(r.status).toBe(200);
  expect(r.body).toEqual({ data: [], next_cursor: null, count: 0 });
});
