import { startStack, type Stack } from '@lab/testing';
import { call } from './http';

let stack: Stack;
let orgA: string;
let orgB: string;
let researcher: string;
let outsider: string;
let apiKey: string;
let readKey: string;
let pat: string;
let boundPat: string;
let outsiderPat: string;

const get = (path: string, token?: string, headers?: Record<string, string>) => call(stack.url, 'GET', path, { token, headers });

beforeAll(async () => {
  stack = await startStack();
  const { admin } = stack;
  orgA = (await admin.createOrg()).id;
  orgB = (await admin.createOrg()).id;
  researcher = (await admin.createUser()).id;
  outsider = (await admin.createUser()).id;
  await admin.putMember(orgA, researcher, 'researcher');
  await admin.putMember(orgB, researcher, 'researcher');
  apiKey = (await admin.createApiKey(orgA, { scopes: ['read', 'write'] })).token;
  readKey = (await admin.createApiKey(orgA, { scopes: ['read'] })).token;
  pat = (await admin.createPat(researcher, { scopes: ['read', 'write'] })).token;
  boundPat = (await admin.createPat(researcher, { scopes: ['read'], org_id: orgA })).token;
  outsiderPat = (await admin.createPat(outsider, { scopes: ['read'] })).token;
});

afterAll(async () => {
  await stack?.stop();
});

describe('meta', () => {
  it('answers health without a token', async () => {
    const r = await get('/v1/health');
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ status: 'ok' });
    expect(r.headers.get('x-request-id')).toBeTruthy();
  });

  it('echoes a sane incoming request id and replaces an insane one', async () => {
    expect((await get('/v1/health', undefined, { 'x-request-id': 'abc-123' })).headers.get('x-request-id')).toBe('abc-123');
    expect((await get('/v1/health', undefined, { 'x-request-id': 'a b\tc'.repeat(50) })).headers.get('x-request-id')).not.toContain(' ');
  });

  it('describes the caller on ping for an API key', async () => {
    const r = await get('/v1/ping', apiKey);
    expect(r.status).toBe(200);
    expect(r.body).toEqual({
      ok: true,
      authenticated_as: { kind: 'api_key', user_id: null, org_id: orgA },
      resources: ['experiments', 'projects', 'samples'],
      docs: `${stack.url}/v1/openapi.json`,
    });
    expect(r.headers.get('x-ratelimit-limit')).toBe('120');
  });

  it('describes the caller on ping for a PAT with an org selection', async () => {
    const r = await get(`/v1/ping?org_id=${orgA}`, pat);
    expect(r.status).toBe(200);
    expect(r.body.authenticated_as).toEqual({ kind: 'pat', user_id: researcher, org_id: orgA });
  });

  it('serves the OpenAPI outline that ping points to', async () => {
    const r = await get('/v1/openapi.json');
    expect(r.status).toBe(200);
    expect(r.body.openapi).toBe('3.1.0');
    expect(r.body.paths['/v1/samples']).toBeDefined();
  });

  it('answers unknown routes 404 and wrong methods 405 in the error envelope', async () => {
    const nf = await get('/v1/nothing-here', apiKey);
    expect(nf.status).toBe(404);
    expect(nf.body.error.code).toBe('not_found');
    const na = await call(stack.url, 'DELETE', '/v1/samples', { token: apiKey });
    expect(na.status).toBe(405);
    expect(na.body.error.code).toBe('method_not_allowed');
  });
});

describe('authentication', () => {
  it.each([
    ['no header', undefined, {}],
    ['an unknown token', 'lab_00000000000000000000000000000000_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx', {}],
    ['garbage', 'not-a-token', {}],
    ['a non-bearer scheme', undefined, { authorization: `Basic ${Buffer.from('a:b').toString('base64')}` }],
  ])('answers 401 unauthorized for %s', async (_name, token, headers) => {
    const r = await get('/v1/samples', token, headers);
    expect(r.status).toBe(401);
    expect(r.body.error.code).toBe('unauthorized');
  });

  // the token is checked before the body is read, so what the body holds cannot
  // turn a 401 into a 400 or a 413
  it.each([
    ['malformed JSON', '{"name": ', {}],
    ['a body that is not JSON', 'name=x', { 'content-type': 'text/plain' }],
    ['a body over 1 MB', JSON.stringify({ name: 'x', blob: 'x'.repeat(1_100_000) }), {}],
    ['a NUL escape', '{"name":"a\\u0000b"}', {}],
  ])('answers 401 before looking at %s', async (_name, body, headers) => {
    for (const token of [undefined, 'lab_00000000000000000000000000000000_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx']) {
      const r = await call(stack.url, 'POST', '/v1/samples', { token, body, headers: headers });
      expect([r.status, r.body.error.code]).toEqual([401, 'unauthorized']);
    }
    const admin = await call(stack.url, 'POST', '/admin/v1/orgs', { token: 'op_wrong', body, headers: headers });
    expect(admin.status).toBe(401);
  });

  it('refuses a user sign-in token on /v1', async () => {
    const email = `s${Date.now()}@example.test`;
    const u = await stack.admin.createUser({ email, password: 'correct horse battery' });
    await stack.admin.putMember(orgA, u.id, 'researcher');
    const grant = await call(stack.url, 'POST', '/auth/v1/token', { body: { grant_type: 'password', email, password: 'correct horse battery' } });
    expect(grant.status).toBe(200);
    const r = await get(`/v1/samples?org_id=${orgA}`, grant.body.access_token);
    expect(r.status).toBe(401);
  });

  it('throttles password attempts per account: past 10 a minute even the right password gets 429, other accounts do not', async () => {
    const email = `g${Date.now()}@example.test`;
    await stack.admin.createUser({ email, password: 'correct horse battery' });
    const grant = (who: string, password: string) => call(stack.url, 'POST', '/auth/v1/token', { body: { grant_type: 'password', email: who, password } });
    for (let i = 0; i < 10; i++) expect((await grant(email, `wrong ${i}`)).status).toBe(400); // invalid_grant
    // the same account, written differently, is the same account
    const limited = await grant(` ${email.toUpperCase()} `, 'correct horse battery');
    expect(limited.status).toBe(429);
    expect(limited.body.error.code).toBe('rate_limited');
    const other = `h${Date.now()}@example.test`;
    await stack.admin.createUser({ email: other, password: 'correct horse battery' });
    expect((await grant(other, 'correct horse battery')).status).toBe(200);
  });
});

describe('organisation selection', () => {
  it('selects the org of an unbound PAT by query or header', async () => {
    expect((await get(`/v1/samples?org_id=${orgB}`, pat)).status).toBe(200);
    expect((await get('/v1/samples', pat, { 'x-org-id': orgB })).status).toBe(200);
  });

  it('needs an org for an unbound PAT', async () => {
    const r = await get('/v1/samples', pat);
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('org_required');
  });

  it('answers 400 for an org id that is not a UUID', async () => {
    const r = await get('/v1/samples?org_id=nope', pat);
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('validation_failed');
  });

  it('answers 401, not 400, for a bad org selection with an unknown or missing token', async () => {
    const unknown = 'lab_00000000000000000000000000000000_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx';
    for (const [path, headers] of [
      ['/v1/samples?org_id=nope', {}],
      ['/v1/samples?org_id=a&org_id=b', {}],
      ['/v1/samples', { 'x-org-id': 'nope' }],
      [`/v1/samples?org_id=${orgA}`, { 'x-org-id': orgB }],
    ] as const) {
      for (const token of [unknown, undefined]) expect((await get(path, token, headers)).status).toBe(401);
      expect((await get(path, pat, headers)).status).toBe(400);
    }
    // an API key names its organisation: a forged one selecting another is 401, a real one 403
    const forged = `lab_${orgA.replace(/-/g, '')}_${'x'.repeat(43)}`;
    expect((await get('/v1/samples', forged, { 'x-org-id': orgB })).status).toBe(401);
    expect((await get('/v1/samples', apiKey, { 'x-org-id': orgB })).status).toBe(403);
  });

  it('refuses another org for a bound PAT or an API key', async () => {
    expect((await get(`/v1/samples?org_id=${orgA}`, boundPat)).status).toBe(200);
    expect((await get(`/v1/samples?org_id=${orgB}`, boundPat)).status).toBe(403);
    expect((await get('/v1/samples', apiKey, { 'x-org-id': orgB })).status).toBe(403);
  });

  it('refuses a user who is not a member', async () => {
    const r = await get(`/v1/samples?org_id=${orgA}`, outsiderPat);
    expect(r.status).toBe(403);
  });
});

describe('scopes and modules', () => {
  it('refuses a write with a read-only key, naming the scope', async () => {
    const r = await call(stack.url, 'POST', '/v1/samples', { token: readKey, body: { name: 'x' } });
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('insufficient_scope');
    expect(r.body.error.message).toContain('write');
    expect(r.headers.get('x-ratelimit-remaining')).not.toBeNull();
  });

  it('needs audit:read for the audit log', async () => {
    const r = await get('/v1/audit', apiKey);
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('insufficient_scope');
    expect(r.body.error.message).toBe('token lacks the audit:read scope');
  });

  it('answers 403 module_not_enabled for equipment without lab_equipment', async () => {
    const r = await get('/v1/equipment', apiKey);
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('module_not_enabled');
  });

  it('answers 503 service_unavailable when the module is on but the service is not deployed', async () => {
    const org = await stack.admin.createOrg({ modules: ['lab_equipment'] });
    const key = (await stack.admin.createApiKey(org.id, { scopes: ['read'] })).token;
    const r = await get('/v1/equipment', key);
    expect(r.status).toBe(503);
    expect(r.body.error.code).toBe('service_unavailable');
  });
});

describe('revocation and membership changes', () => {
  it('refuses a revoked token at once', async () => {
    const t = await stack.admin.createApiKey(orgA, { scopes: ['read'] });
    expect((await get('/v1/samples', t.token)).status).toBe(200);
    await stack.admin.call('DELETE', `/tokens/${t.id}`, undefined, 204);
    const r = await get('/v1/samples', t.token);
    expect(r.status).toBe(401);
  });

  it('refuses a removed member', async () => {
    const u = await stack.admin.createUser();
    await stack.admin.putMember(orgA, u.id, 'researcher');
    const t = await stack.admin.createPat(u.id, { scopes: ['read'] });
    expect((await get(`/v1/samples?org_id=${orgA}`, t.token)).status).toBe(200);
    await stack.admin.call('DELETE', `/orgs/${orgA}/members/${u.id}`, undefined, 204);
    expect((await get(`/v1/samples?org_id=${orgA}`, t.token)).status).toBe(403);
  });
});
