import { startStack, type Stack } from '@lab/testing';
import { call, eventually } from './http';

let stack: Stack;

const op = (method: string, path: string, body?: unknown, token?: string) =>
  call(stack.url, method, `/admin/v1${path}`, { token: token ?? stack.operatorToken, body });

beforeAll(async () => {
  stack = await startStack();
});

afterAll(async () => {
  await stack?.stop();
});

describe('an organisation’s modules list', () => {
  it('is limited to what the document says: the most items it states are taken, one more is 400', async () => {
    const doc = (await call(stack.url, 'GET', '/v1/openapi.json')).body;
    const text = JSON.stringify(doc.paths['/admin/v1/orgs'].post.requestBody);
    const schema = text.includes('"$ref"')
      ? doc.components.schemas[JSON.parse(text).content['application/json'].schema.$ref.split('/').pop()]
      : JSON.parse(text).content['application/json'].schema;
    const max: number = schema.properties.modules.maxItems;
    expect(max).toBe(12);
    const many = (n: number) => Array.from({ length: n }, (_, i) => ['lab_equipment', 'analytics_qc', 'sample_intake'][i % 3]);
    const ok = await op('POST', '/orgs', { name: 'modules at the limit', modules: many(max) });
    expect([ok.status, ok.body.data.modules]).toEqual([201, ['lab_equipment', 'analytics_qc', 'sample_intake']]);
    const over = await op('POST', '/orgs', { name: 'modules past the limit', modules: many(max + 1) });
    expect([over.status, over.body.error.code]).toEqual([400, 'validation_failed']);
  });
});

describe('management API', () => {
  it('answers 401 without the operator token', async () => {
    for (const token of [undefined, 'wrong-operator-token']) {
      const r = await call(stack.url, 'POST', '/admin/v1/orgs', { token, body: { name: 'x' } });
      expect(r.status).toBe(401);
      expect(r.body.error.code).toBe('unauthorized');
    }
  });

  it.each([
    ['POST', '/orgs', {}],
    ['POST', '/orgs', { name: 'x', modules: ['teleportation'] }],
    ['POST', '/orgs', { name: 'x', rate_limit: { per_minute: 0, per_hour: 10 } }],
    ['POST', '/users', { email: 'not-an-email' }],
    ['POST', '/orgs/not-a-uuid/departments', { name: 'd' }],
  ])('answers 400 validation_failed for %s %s %j', async (method, path, body) => {
    const r = await op(method, path, body);
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('validation_failed');
    expect(r.body.error.details).toBeDefined();
  });

  it('creates and updates an organisation with the documented shapes', async () => {
    const created = await op('POST', '/orgs', { name: 'Lab One', modules: ['sample_intake'], rate_limit: { per_minute: 10, per_hour: 100 } });
    expect(created.status).toBe(201);
    expect(created.body.data).toMatchObject({
      id: expect.any(String),
      name: 'Lab One',
      modules: ['sample_intake'],
      rate_limit: { per_minute: 10, per_hour: 100 },
    });
    const patched = await op('PATCH', `/orgs/${created.body.data.id}`, { name: 'Lab Two' });
    expect(patched.status).toBe(200);
    expect(patched.body.data).toMatchObject({ name: 'Lab Two', modules: ['sample_intake'] });
  });

  it('creates departments, users, members, keys and PATs with the documented shapes', async () => {
    const org = (await op('POST', '/orgs', { name: 'Lab' })).body.data;
    const dept = await op('POST', `/orgs/${org.id}/departments`, { name: 'Chemistry' });
    expect(dept.status).toBe(201);
    expect(dept.body.data).toMatchObject({ id: expect.any(String), name: 'Chemistry' });
    const user = await op('POST', '/users', { email: `m${Date.now()}@example.test`, name: 'M' });
    expect(user.status).toBe(201);
    expect(user.body.data).toEqual({ id: expect.any(String), email: expect.any(String), name: 'M' });
    const member = await op('PUT', `/orgs/${org.id}/members/${user.body.data.id}`, { role: 'dept_admin', department_id: dept.body.data.id });
    expect(member.status).toBe(200);
    expect(member.body.data).toEqual({ org_id: org.id, user_id: user.body.data.id, role: 'dept_admin', department_id: dept.body.data.id });
    const key = await op('POST', `/orgs/${org.id}/api-keys`, { name: 'k', scopes: ['read'], user_id: user.body.data.id });
    expect(key.status).toBe(201);
    expect(key.body.data).toEqual({ id: expect.any(String), token: expect.any(String), scopes: ['read'], user_id: user.body.data.id });
    const pat = await op('POST', `/users/${user.body.data.id}/pats`, { name: 'p', scopes: ['read'], org_id: org.id });
    expect(pat.status).toBe(201);
    expect(pat.body.data).toEqual({ id: expect.any(String), token: expect.stringMatching(/^pat_/), scopes: ['read'], org_id: org.id });
    expect((await op('PUT', `/orgs/${org.id}/members/${user.body.data.id}`, { role: 'owner' })).status).toBe(400);
  });

  it('answers 503 service_unavailable for routes of services not deployed here', async () => {
    const org = (await op('POST', '/orgs', { name: 'Lab' })).body.data;
    const r = await op('POST', `/orgs/${org.id}/webhook-subscriptions`, { url: 'https://example.test/hook', events: ['*'] });
    expect(r.status).toBe(503);
    expect(r.body.error.code).toBe('service_unavailable');
  });

  it('applies an organisation update to cached tokens at once', async () => {
    const org = (await op('POST', '/orgs', { name: 'Lab' })).body.data;
    const token = (await op('POST', `/orgs/${org.id}/api-keys`, { name: 'k', scopes: ['read'] })).body.data.token;
    expect((await call(stack.url, 'GET', '/v1/equipment', { token })).body.error.code).toBe('module_not_enabled');
    await op('PATCH', `/orgs/${org.id}`, { modules: ['lab_equipment'] });
    expect((await call(stack.url, 'GET', '/v1/equipment', { token })).body.error.code).toBe('service_unavailable');
  });
});

describe('a second gateway replica', () => {
  it('forgets a token revoked through another replica on identity’s event', async () => {
    const replica = await stack.replica();
    try {
      const org = (await op('POST', '/orgs', { name: 'Lab' })).body.data;
      const t = (await op('POST', `/orgs/${org.id}/api-keys`, { name: 'k', scopes: ['read'] })).body.data;
      expect((await call(replica.url, 'GET', '/v1/samples', { token: t.token })).status).toBe(200);
      expect((await op('DELETE', `/tokens/${t.id}`)).status).toBe(204);
      await eventually(async () => ((await call(replica.url, 'GET', '/v1/samples', { token: t.token })).status === 401 ? true : undefined), 5_000);
    } finally {
      await replica.stop();
    }
  });
});
