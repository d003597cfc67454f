import { randomUUID } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { startStack, type Stack } from '@lab/testing';
import { call } from './http';

let stack: Stack;
let orgA: string;
let adminKey: string;
let writeKey: string;
let otherOrgKey: string;
let viewerPat: string;

const api = (method: string, path: string, token: string, body?: unknown, headers?: Record<string, string>) =>
  call(stack.url, method, path, { token, body, headers });

beforeAll(async () => {
  stack = await startStack();
  const { admin } = stack;
  orgA = (await admin.createOrg()).id;
  const orgB = (await admin.createOrg()).id;
  adminKey = (await admin.createApiKey(orgA, { scopes: ['admin'] })).token;
  writeKey = (await admin.createApiKey(orgA, { scopes: ['write'] })).token;
  otherOrgKey = (await admin.createApiKey(orgB, { scopes: ['read', 'write'] })).token;
  const viewer = await admin.createUser();
  await admin.putMember(orgA, viewer.id, 'viewer');
  viewerPat = (await admin.createPat(viewer.id, { scopes: ['write'], org_id: orgA })).token;
});

afterAll(async () => {
  await stack?.stop();
});

describe('HEAD', () => {
  it("answers a GET's status and headers without its body, wherever GET is answered", async () => {
    const id = (await api('POST', '/v1/samples', writeKey, { name: 'headed' })).body.data.id as string;
    const auth = { authorization: `Bearer ${writeKey}` };
    const get = await fetch(`${stack.url}/v1/samples/${id}`, { headers: auth });
    await get.arrayBuffer();
    const head = await fetch(`${stack.url}/v1/samples/${id}`, { method: 'HEAD', headers: auth });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe('');
    for (const h of ['content-type', 'x-ratelimit-limit', 'x-content-type-options']) expect([h, head.headers.get(h)]).toEqual([h, get.headers.get(h)]);
    expect(head.headers.get('x-request-id')).toBeTruthy();
    // the same refusals as GET
    expect((await fetch(`${stack.url}/v1/samples/${randomUUID()}`, { method: 'HEAD', headers: auth })).status).toBe(404);
    expect((await fetch(`${stack.url}/v1/samples/${id}`, { method: 'HEAD' })).status).toBe(401);
    expect((await fetch(`${stack.url}/v1/samples/${id}`, { method: 'HEAD', headers: { authorization: `Bearer ${otherOrgKey}` } })).status).toBe(404);
    expect((await fetch(`${stack.url}/v1/health`, { method: 'HEAD' })).status).toBe(200);
    // Allow names HEAD beside GET, and only there
    const wrong = await fetch(`${stack.url}/v1/samples`, { method: 'DELETE', headers: auth });
    expect([wrong.status, wrong.headers.get('allow')]).toEqual([405, 'GET, HEAD, POST']);
    const postOnly = await fetch(`${stack.url}/v1/results/upload`, { method: 'HEAD', headers: auth });
    expect([postOnly.status, postOnly.headers.get('allow')]).toEqual([405, 'POST']);
    // and it changes nothing: the record is as it was
    expect((await api('GET', `/v1/samples/${id}`, writeKey)).body.data.name).toBe('headed');
  });
});

describe('generic CRUD of samples', () => {
  it('creates, reads, updates, replaces, lists and deletes', async () => {
    const created = await api('POST', '/v1/samples', writeKey, { name: 'S-1', type: 'blood', status: 'new' });
    expect(created.status).toBe(201);
    expect(created.body.data).toMatchObject({ name: 'S-1', type: 'blood', status: 'new' });
    const id = created.body.data.id as string;

    const got = await api('GET', `/v1/samples/${id}`, writeKey);
    expect(got.status).toBe(200);
    expect(got.body.data.id).toBe(id);

    const patched = await api('PATCH', `/v1/samples/${id}`, writeKey, { status: 'received' });
    expect(patched.status).toBe(200);
    expect(patched.body.data).toMatchObject({ name: 'S-1', status: 'received' });

    const put = await api('PUT', `/v1/samples/${id}`, writeKey, { storage_location: 'freezer 2' });
    expect(put.status).toBe(200);
    expect(put.body.data.storage_location).toBe('freezer 2');

    const deleted = await api('DELETE', `/v1/samples/${id}`, adminKey);
    expect(deleted.status).toBe(204);
    expect(deleted.text).toBe('');
    expect((await api('GET', `/v1/samples/${id}`, writeKey)).status).toBe(404);
  });

  it('says where a created record is (Location, as the document says), and a dry run creates none', async () => {
    const created = await api('POST', '/v1/samples', writeKey, { name: 'located' });
    expect(created.status).toBe(201);
    const location = created.headers.get('location');
    expect(location).toBe(`/v1/samples/${created.body.data.id}`);
    expect((await api('GET', location!, writeKey)).body.data.name).toBe('located');
    const dry = await api('POST', '/v1/samples', writeKey, { name: 'not made' }, { 'x-test-mode': 'true' });
    expect([dry.status, dry.headers.get('location'), dry.body.data.test_mode]).toEqual([200, null, true]);
  });

  it('pages lists in the list envelope', async () => {
    for (let i = 0; i < 3; i++) expect((await api('POST', '/v1/samples', writeKey, { name: `page-${i}` })).status).toBe(201);
    const first = await api('GET', '/v1/samples?limit=2&offset=0&order_by=created_at&order=asc', writeKey);
    expect(first.status).toBe(200);
    expect(first.body.data).toHaveLength(2);
    expect(first.body.pagination).toEqual({ limit: 2, offset: 0, total: expect.any(Number) });
    expect(first.body.pagination.total).toBeGreaterThanOrEqual(3);
    const second = await api('GET', '/v1/samples?limit=2&offset=2&order_by=created_at&order=asc', writeKey);
    expect(second.body.pagination).toMatchObject({ limit: 2, offset: 2 });
    const ids = [...first.body.data, ...second.body.data].map((r: { id: string }) => r.id);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('cuts a page of heavy records by size, says so, and pages on from offset + limit', async () => {
    const org = (await stack.admin.createOrg()).id;
    const key = (await stack.admin.createApiKey(org, { scopes: ['write'] })).token;
    const made: string[] = [];
    for (let i = 0; i < 12; i++) {
      const r = await api('POST', '/v1/experiments', key, { title: `heavy ${i}`, content: { body: 'x'.repeat(900_000) } });
      expect(r.status).toBe(201);
      made.push(r.body.data.id);
    }
    const first = await api('GET', '/v1/experiments?limit=50&order=asc', key);
    expect(first.status).toBe(200);
    const { limit, offset, total } = first.body.pagination;
    expect(first.body.data.length).toBeLessThan(12);
    expect({ limit, offset, total }).toEqual({ limit: first.body.data.length, offset: 0, total: 12 });
    expect(first.headers.get('warning')).toBe(`299 - "page cut by size at ${limit} records; continue at offset ${limit}"`);
    const rest = await api('GET', `/v1/experiments?limit=50&order=asc&offset=${Number(offset) + Number(limit)}`, key);
    expect(rest.headers.get('warning')).toBeNull();
    expect([...first.body.data, ...rest.body.data].map((e: { id: string }) => e.id)).toEqual(made);
  });

  it('pages a whole list by keyset: since_created_at, then next_cursor, oldest first, no total', async () => {
    const org = (await stack.admin.createOrg()).id;
    const key = (await stack.admin.createApiKey(org, { scopes: ['write'] })).token;
    const made: { id: string; created_at: string }[] = [];
    for (let i = 0; i < 5; i++) made.push((await api('POST', '/v1/samples', key, { name: `keyset ${i}` })).body.data);
    const seen: string[] = [];
    const cursors: { since_created_at: string; since_id: string }[] = [];
    let path = '/v1/samples?limit=2&since_created_at=2000-01-01T00:00:00Z';
    for (let n = 0; n < 5; n++) {
      const r = await api('GET', path, key);
      expect(r.status).toBe(200);
      expect(r.body.pagination).toMatchObject({ limit: 2, offset: 0, total: null });
      seen.push(...r.body.data.map((x: { id: string }) => x.id));
      const next = r.body.pagination.next_cursor;
      if (!next) break;
      cursors.push(next);
      // the cursor goes into the URL as it is (a UTC time, no '+'); an upper-case id is the same id
      path = `/v1/samples?limit=2&since_created_at=${next.since_created_at}&since_id=${next.since_id.toUpperCase()}`;
    }
    expect(seen).toEqual(made.map((m) => m.id));
    expect(cursors.map((c) => c.since_id)).toEqual([made[1]!.id, made[3]!.id]);
    for (const c of cursors) expect(c.since_created_at).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/);
    // a time alone starts with the records created at or after it
    const from = await api('GET', `/v1/samples?since_created_at=${encodeURIComponent(made[2]!.created_at)}`, key);
    expect(from.body.data.map((x: { id: string }) => x.id)).toEqual(made.slice(2).map((m) => m.id));
    expect(from.body.pagination.next_cursor).toBeNull();
  });

  it.each([
    ['since_id=0190a0c8-0000-7000-8000-000000000001', 'since_id'],
    ['since_created_at=yesterday', 'since_created_at'],
    ['since_created_at=2026-01-01T00:00:00Z&since_id=nope', 'since_id'],
    ['since_created_at=2026-01-01T00:00:00Z&offset=10', 'offset'],
    ['since_created_at=2026-01-01T00:00:00Z&order=desc', 'order'],
    [`since_created_at=2026-01-01T00:00:00.${'0'.repeat(200)}Z`, 'since_created_at'],
  ])('refuses a keyset list with %s (400 naming %s)', async (query, field) => {
    const r = await api('GET', `/v1/samples?${query}`, writeKey);
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('validation_failed');
    expect(r.body.error.details.fields.map((f: { path: string }) => f.path)).toContain(field);
  });

  it('takes offset=0, the default generated clients send, with keyset paging', async () => {
    const all = await api('GET', '/v1/samples?since_created_at=2000-01-01T00:00:00Z&limit=5', writeKey);
    const zero = await api('GET', '/v1/samples?since_created_at=2000-01-01T00:00:00Z&limit=5&offset=0', writeKey);
    expect(zero.status).toBe(200);
    expect(zero.body).toEqual(all.body);
  });

  it('cuts a keyset page of heavy records by size, says so, and goes on from next_cursor', async () => {
    const org = (await stack.admin.createOrg()).id;
    const key = (await stack.admin.createApiKey(org, { scopes: ['write'] })).token;
    const made: string[] = [];
    for (let i = 0; i < 12; i++)
      made.push((await api('POST', '/v1/experiments', key, { title: `heavy ${i}`, content: { body: 'x'.repeat(900_000) } })).body.data.id);
    const first = await api('GET', '/v1/experiments?limit=50&since_created_at=2000-01-01T00:00:00Z', key);
    expect(first.body.data.length).toBeLessThan(12);
    expect(first.body.pagination.limit).toBe(first.body.data.length);
    expect(first.headers.get('warning')).toBe(`299 - "page cut by size at ${first.body.data.length} records; continue from next_cursor"`);
    const c = first.body.pagination.next_cursor;
    const rest = await api('GET', `/v1/experiments?limit=50&since_created_at=${c.since_created_at}&since_id=${c.since_id}`, key);
    expect(rest.body.pagination.next_cursor).toBeNull();
    expect([...first.body.data, ...rest.body.data].map((e: { id: string }) => e.id)).toEqual(made);
  });

  it('does not show a record of another organisation', async () => {
    const created = await api('POST', '/v1/samples', writeKey, { name: 'private' });
    const r = await api('GET', `/v1/samples/${created.body.data.id}`, otherOrgKey);
    expect(r.status).toBe(404);
    expect(r.body.error.code).toBeDefined();
  });

  it('answers 404 for an id that is not a UUID', async () => {
    const r = await api('GET', '/v1/samples/not-a-uuid', writeKey);
    expect(r.status).toBe(404);
    expect(r.body.error.code).toBe('not_found');
  });

  it('answers 400 validation_failed with details for an invalid body', async () => {
    const r = await api('POST', '/v1/samples', writeKey, { type: 'blood' });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('validation_failed');
    expect(r.body.error.details).toBeDefined();
  });

  it('answers 400 invalid_json for malformed JSON and 400 for a non-object body', async () => {
    const bad = await api('POST', '/v1/samples', writeKey, '{"name": ');
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe('invalid_json');
    const arr = await api('POST', '/v1/samples', writeKey, [{ name: 'x' }]);
    expect(arr.status).toBe(400);
    expect(arr.body.error.code).toBe('validation_failed');
    const text = await api('POST', '/v1/samples', writeKey, 'name=x', { 'content-type': 'text/plain' });
    expect(text.status).toBe(400);
  });

  it('takes a gzip body, and answers 400 invalid_body for a broken one, storing nothing', async () => {
    const send = (body: Buffer | string, encoding: string) =>
      fetch(`${stack.url}/v1/samples`, {
        method: 'POST',
        headers: { authorization: `Bearer ${writeKey}`, 'content-type': 'application/json', 'content-encoding': encoding },
        body,
      });
    const ok = await send(gzipSync(JSON.stringify({ name: 'zipped' })), 'gzip');
    expect(ok.status).toBe(201);
    const before = (await api('GET', '/v1/samples?limit=1', writeKey)).body.pagination.total;
    const whole = gzipSync(JSON.stringify({ name: 'broken' }));
    for (const [body, encoding] of [
      ['{"name":"not compressed"}', 'gzip'],
      [whole.subarray(0, whole.length - 6), 'gzip'],
      ['{"name":"not compressed"}', 'deflate'],
      ['{"name":"not compressed"}', 'br'],
    ] as const) {
      const r = await send(body, encoding);
      expect([r.status, ((await r.json()) as { error: { code: string } }).error.code]).toEqual([400, 'invalid_body']);
    }
    expect((await api('GET', '/v1/samples?limit=1', writeKey)).body.pagination.total).toBe(before);
  });

  it('answers 413 for a body over 1 MB', async () => {
    const r = await api('POST', '/v1/samples', writeKey, { name: 'x', metadata: { blob: 'x'.repeat(1_100_000) } });
    expect(r.status).toBe(413);
    expect(r.body.error).toBeDefined();
  });

  it('refuses a delete by a token without an administrator role', async () => {
    const created = await api('POST', '/v1/samples', writeKey, { name: 'keep' });
    const r = await api('DELETE', `/v1/samples/${created.body.data.id}`, writeKey);
    expect(r.status).toBe(403);
  });
});

describe('X-Test-Mode', () => {
  const testMode = { 'x-test-mode': 'true' };

  it('echoes a create without validating or writing', async () => {
    const before = await api('GET', '/v1/samples?limit=1', writeKey);
    const r = await api('POST', '/v1/samples', writeKey, { nonsense: 1 }, testMode);
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ data: { test_mode: true, would_apply: { operation: 'create', resource: 'samples', body: { nonsense: 1 } } } });
    const after = await api('GET', '/v1/samples?limit=1', writeKey);
    expect(after.body.pagination.total).toBe(before.body.pagination.total);
  });

  it('echoes update, replace and delete with the id', async () => {
    const id = '0190a0c8-0000-7000-8000-000000000001';
    const u = await api('PATCH', `/v1/samples/${id}`, writeKey, { status: 'x' }, testMode);
    expect(u.body.data.would_apply).toEqual({ operation: 'update', resource: 'samples', id, body: { status: 'x' } });
    const p = await api('PUT', `/v1/samples/${id}`, writeKey, { status: 'x' }, testMode);
    expect(p.body.data.would_apply.operation).toBe('replace');
    const d = await api('DELETE', `/v1/samples/${id}`, adminKey, undefined, testMode);
    expect(d.status).toBe(200);
    expect(d.body.data.would_apply).toEqual({ operation: 'delete', resource: 'samples', id });
  });

  it('still checks authentication, scope and preliminary permission', async () => {
    expect((await call(stack.url, 'POST', '/v1/samples', { body: {}, headers: testMode })).status).toBe(401);
    const readKey = (await stack.admin.createApiKey(orgA, { scopes: ['read'] })).token;
    expect((await api('POST', '/v1/samples', readKey, {}, testMode)).status).toBe(403);
    expect((await api('POST', '/v1/samples', viewerPat, {}, testMode)).status).toBe(403);
    const id = '0190a0c8-0000-7000-8000-000000000002';
    expect((await api('DELETE', `/v1/samples/${id}`, writeKey, undefined, testMode)).status).toBe(403);
  });

  it.each(['yes', '1', 'TRUE ', 'on', ''])('refuses the value %j with 400 and writes or deletes nothing', async (value) => {
    const before = (await api('GET', '/v1/samples?limit=1', writeKey)).body.pagination.total;
    const r = await api('POST', '/v1/samples', writeKey, { name: 'would be real', type: 'blood' }, { 'x-test-mode': value });
    if (value.trim().toLowerCase() === 'true') {
      // case and spaces around the documented value are forgiven: still test mode
      expect(r.body.data.test_mode).toBe(true);
    } else {
      expect([r.status, r.body.error.code, r.body.error.details.fields[0].path]).toEqual([400, 'validation_failed', 'X-Test-Mode']);
    }
    expect((await api('GET', '/v1/samples?limit=1', writeKey)).body.pagination.total).toBe(before);

    const kept = await api('POST', '/v1/samples', writeKey, { name: 'kept', type: 'blood' });
    const d = await api('DELETE', `/v1/samples/${kept.body.data.id}`, adminKey, undefined, { 'x-test-mode': value });
    expect(d.status).toBe(value.trim().toLowerCase() === 'true' ? 200 : 400);
    expect((await api('GET', `/v1/samples/${kept.body.data.id}`, writeKey)).status).toBe(200);
  });

  it('takes false as a real write', async () => {
    const r = await api('POST', '/v1/samples', writeKey, { name: 'real', type: 'blood' }, { 'x-test-mode': 'false' });
    expect(r.status).toBe(201);
  });

  it('is ignored on reads', async () => {
    const r = await api('GET', '/v1/samples', writeKey, undefined, testMode);
    expect(r.status).toBe(200);
    expect(r.body.pagination).toBeDefined();
  });
});

describe('input PostgreSQL cannot take is a 400 that changes nothing', () => {
  const countSamples = async () => (await api('GET', '/v1/samples?limit=1', writeKey)).body.pagination.total as number;

  it.each([
    ['a lone surrogate in a field', '{"name":"S-\\ud800"}', 'name'],
    ['a NUL inside free-form metadata', '{"name":"S","metadata":{"notes":["ok","a\\u0000b"]}}', 'metadata.notes.1'],
    ['JSON nested far deeper than any record', `{"name":"S","metadata":{"x":${'['.repeat(20_000)}${']'.repeat(20_000)}}}`, ''],
    // JSON.parse makes these Infinity, which would be stored as null
    ['a number past the double range', '{"name":"S","metadata":{"mw":1e309}}', 'metadata.mw'],
    ['a negative one written out in 309 digits', `{"name":"S","metadata":{"w":[1,-${'9'.repeat(309)}]}}`, 'metadata.w.1'],
  ])('%s', async (_what, raw, field) => {
    const before = await countSamples();
    const r = await api('POST', '/v1/samples', writeKey, raw, { 'idempotency-key': `bad-input-${field}-${raw.length}` });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ code: 'validation_failed', details: { field } });
    expect(await countSamples()).toBe(before);
  });

  it('1e308 and a long exponent that stays finite are taken as they are', async () => {
    const r = await api('POST', '/v1/samples', writeKey, '{"name":"S-big","metadata":{"a":1e308,"b":1.5e-400,"c":"e999"}}');
    expect(r.status).toBe(201);
    expect(r.body.data.metadata).toEqual({ a: 1e308, b: 0, c: 'e999' });
  });

  it('a body that is JSON but not an object is validation_failed', async () => {
    for (const raw of ['null', '"text"', '[1,2]', '7']) {
      const r = await api('POST', '/v1/samples', writeKey, raw);
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('validation_failed');
    }
  });

  it('year 0000 and an offset past int32 are refused, not failed in SQL', async () => {
    const p = await api('POST', '/v1/projects', writeKey, { name: 'P', start_date: '0000-01-01' });
    expect(p.status).toBe(400);
    expect(p.body.error.details.field).toBe('start_date');
    expect((await api('GET', '/v1/projects?start_date=0000-01-01', writeKey)).status).toBe(400);
    expect((await api('GET', '/v1/samples?offset=2147483648', writeKey)).status).toBe(400);
    expect((await api('GET', '/v1/samples?offset=2147483647', writeKey)).status).toBe(200);
  });
});
