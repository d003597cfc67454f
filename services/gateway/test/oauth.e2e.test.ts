import { Client } from 'pg';
import { hashToken } from '@lab/identity';
import { startStack, waitFor, type Stack } from '@lab/testing';
import { call, eventually } from './http';
import { authorize, consent, FN, formOf, getAuthorize, postForm, signIn, token, type AuthorizeParams, type FlowUser } from './oauth-flow';

const REDIRECT = 'https://client.example.test/callback';
const password = 'a long enough password';

let stack: Stack;
let orgId: string;
let otherOrgId: string;
let client: { client_id: string; client_secret: string };
let researcher: FlowUser & { id: string };
let admin: FlowUser & { id: string };

async function member(role: string, ...orgs: string[]): Promise<FlowUser & { id: string }> {
  const u = await stack.admin.createUser({ password });
  for (const o of orgs) await stack.admin.putMember(o, u.id, role);
  return { id: u.id, email: u.email, password };
}

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'notebook', 'audit'] });
  orgId = (await stack.admin.createOrg()).id;
  otherOrgId = (await stack.admin.createOrg()).id;
  client = await stack.admin.call(
    'POST',
    '/oauth-clients',
    {
      name: 'Example <LIMS>',
      redirect_uris: [REDIRECT, 'http://127.0.0.1:8765/cb'],
      scopes: ['read', 'write', 'admin', 'audit:read'],
    },
    201,
  );
  researcher = await member('researcher', orgId, otherOrgId);
  admin = await member('admin', orgId);
});

afterAll(async () => {
  await stack?.stop();
});

const params = (extra: Partial<AuthorizeParams> = {}): AuthorizeParams => ({
  client_id: client.client_id,
  redirect_uri: REDIRECT,
  scope: 'read write',
  state: 'st-123',
  ...extra,
});

async function codeFor(user: FlowUser, extra: Partial<AuthorizeParams> = {}, org = orgId): Promise<string> {
  const loc = await authorize(stack.url, params(extra), user, org);
  expect(`${loc.origin}${loc.pathname}`).toBe(extra.redirect_uri ?? REDIRECT);
  expect(loc.searchParams.get('state')).toBe(extra.state ?? 'st-123');
  return loc.searchParams.get('code')!;
}

const exchange = (code: string, auth: 'basic' | 'post' | 'json' = 'basic', redirect = REDIRECT) =>
  token(stack.url, client, { grant_type: 'authorization_code', code, redirect_uri: redirect }, auth);
const refresh = (refresh_token: string) => token(stack.url, client, { grant_type: 'refresh_token', refresh_token });
const ping = (t: string) => call(stack.url, 'GET', '/v1/ping', { token: t });

describe('management: POST /admin/v1/oauth-clients', () => {
  it('registers a client and shows the secret once', () => {
    expect(client.client_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(client.client_secret).toMatch(/^ocs_[A-Za-z0-9_-]{43}$/);
  });

  it.each([
    ['a plain http URI', ['http://client.example.test/cb']],
    ['a fragment', ['https://client.example.test/cb#x']],
    ['a relative URI', ['/cb']],
    ['no URI', []],
  ])('refuses %s with 400', async (_n, redirect_uris) => {
    const r = await call(stack.url, 'POST', '/admin/v1/oauth-clients', { token: stack.operatorToken, body: { name: 'x', redirect_uris } });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('validation_failed');
  });
});

describe('authorization code flow', () => {
  it('signs in with CSRF, picks the org, consents, and exchanges the code with client_secret_basic', async () => {
    const login = await getAuthorize(stack.url, params());
    expect(login.status).toBe(200);
    expect(login.headers.get('content-type')).toMatch(/^text\/html/);
    expect(login.headers.get('cache-control')).toBe('no-store');
    expect(login.headers.get('content-security-policy')).toContain("frame-ancestors 'none'");
    expect(login.headers.get('set-cookie')).toMatch(/HttpOnly; SameSite=Strict/);
    // the client's name is escaped
    expect(login.html).toContain('Example &lt;LIMS&gt;');
    expect(login.html).not.toContain('<LIMS>');

    const page = await signIn(stack.url, params(), researcher);
    expect(page.status).toBe(200);
    expect(page.html).toContain(orgId);
    expect(page.html).toContain(otherOrgId);
    const done = await consent(stack.url, page, orgId);
    expect(done.status).toBe(302);
    const loc = new URL(done.location!);
    expect(loc.searchParams.get('state')).toBe('st-123');
    const code = loc.searchParams.get('code')!;
    expect(code).toBeTruthy();

    const t = await exchange(code, 'basic');
    expect(t.status).toBe(200);
    expect(t.headers.get('cache-control')).toBe('no-store');
    expect(t.body).toEqual({
      access_token: expect.stringMatching(/^oat_/),
      token_type: 'bearer',
      expires_in: 3600,
      refresh_token: expect.stringMatching(/^ort_/),
      scope: 'read write',
    });

    const p = await ping(t.body.access_token);
    expect(p.status).toBe(200);
    expect(p.body.authenticated_as).toEqual({ kind: 'oauth', user_id: researcher.id, org_id: orgId });
    const samples = await call(stack.url, 'GET', '/v1/samples', { token: t.body.access_token });
    expect(samples.status).toBe(200);
    expect(samples.body.pagination).toMatchObject({ limit: 50, offset: 0 });
    // bound to the consented organisation
    const other = await call(stack.url, 'GET', '/v1/samples', { token: t.body.access_token, headers: { 'X-Org-Id': otherOrgId } });
    expect(other.status).toBe(403);
    expect(other.body.error.code).toBe('org_mismatch');
  });

  it('exchanges with client_secret_post, and accepts a JSON token request', async () => {
    const form = await exchange(await codeFor(researcher), 'post');
    expect(form.status).toBe(200);
    const jsonBody = await exchange(await codeFor(researcher), 'json');
    expect(jsonBody.status).toBe(200);
    expect((await ping(jsonBody.body.access_token)).status).toBe(200);
  });

  it('accepts an existing sign-in token instead of the login form', async () => {
    const s = await call(stack.url, 'POST', '/auth/v1/token', { body: { grant_type: 'password', email: admin.email, password } });
    const page = await getAuthorize(stack.url, params(), { authorization: `Bearer ${s.body.access_token}` });
    expect(page.status).toBe(200);
    expect(page.html).toContain('name="org_id"');
    const done = await consent(stack.url, page, orgId);
    const code = new URL(done.location!).searchParams.get('code')!;
    expect((await exchange(code)).status).toBe(200);
  });

  it('rotates refresh tokens; reusing an old one revokes the whole grant', async () => {
    const first = (await exchange(await codeFor(researcher))).body;
    const second = await refresh(first.refresh_token);
    expect(second.status).toBe(200);
    expect(second.body.refresh_token).not.toBe(first.refresh_token);
    expect(second.body.access_token).not.toBe(first.access_token);
    expect((await ping(second.body.access_token)).status).toBe(200);

    const reused = await refresh(first.refresh_token);
    expect(reused.status).toBe(400);
    expect(reused.body.error).toBe('invalid_grant');
    // the newest pair dies with the grant
    expect((await refresh(second.body.refresh_token)).body.error).toBe('invalid_grant');
    await eventually(async () => ((await ping(second.body.access_token)).status === 401 ? true : undefined));
  });

  it('removes admin and audit:read for a researcher, keeps them for an admin', async () => {
    const scope = 'read admin audit:read';
    const r = (await exchange(await codeFor(researcher, { scope }))).body;
    expect(r.scope).toBe('read');
    const audit = await call(stack.url, 'GET', '/v1/audit', { token: r.access_token });
    expect(audit.status).toBe(403);
    expect(audit.body.error.code).toBe('insufficient_scope');

    const a = (await exchange(await codeFor(admin, { scope }))).body;
    expect(a.scope.split(' ').sort()).toEqual(['admin', 'audit:read', 'read']);
    expect((await call(stack.url, 'GET', '/v1/audit', { token: a.access_token })).status).toBe(200);
  });

  it('refuses a wrong client secret with 401 invalid_client and a Basic challenge', async () => {
    const code = await codeFor(researcher);
    const r = await token(
      stack.url,
      { ...client, client_secret: `${client.client_secret}x` },
      { grant_type: 'authorization_code', code, redirect_uri: REDIRECT },
    );
    expect(r.status).toBe(401);
    expect(r.body.error).toBe('invalid_client');
    expect(r.headers.get('www-authenticate')).toMatch(/^Basic /);
    const post = await token(stack.url, { ...client, client_secret: 'nope' }, { grant_type: 'authorization_code', code, redirect_uri: REDIRECT }, 'post');
    expect(post.status).toBe(401);
    // the code was not spent by the failed attempts
    expect((await exchange(code)).status).toBe(200);
  });

  it('refuses a code used twice and revokes the tokens issued from it', async () => {
    const code = await codeFor(researcher);
    const first = await exchange(code);
    expect(first.status).toBe(200);
    expect((await ping(first.body.access_token)).status).toBe(200);
    const again = await exchange(code);
    expect(again.status).toBe(400);
    expect(again.body.error).toBe('invalid_grant');
    await eventually(async () => ((await ping(first.body.access_token)).status === 401 ? true : undefined));
    expect((await refresh(first.body.refresh_token)).body.error).toBe('invalid_grant');
  });

  it('binds the code to its redirect_uri and its client', async () => {
    const code = await codeFor(researcher);
    const wrong = await exchange(code, 'basic', 'http://127.0.0.1:8765/cb');
    expect(wrong.status).toBe(400);
    expect(wrong.body.error).toBe('invalid_grant');
    const other = await stack.admin.call<{ client_id: string; client_secret: string }>(
      'POST',
      '/oauth-clients',
      { name: 'other', redirect_uris: [REDIRECT] },
      201,
    );
    const foreign = await token(stack.url, other, { grant_type: 'authorization_code', code, redirect_uri: REDIRECT });
    expect(foreign.body.error).toBe('invalid_grant');
  });

  it('an access token stops working when its user leaves the organisation', async () => {
    const leaver = await member('researcher', orgId);
    const t = (await exchange(await codeFor(leaver))).body;
    expect((await ping(t.access_token)).status).toBe(200);
    await stack.admin.call('DELETE', `/orgs/${orgId}/members/${leaver.id}`, undefined, 204);
    // the removal revoked the grant's tokens (grants-follow-membership.e2e.test.ts)
    const r = await ping(t.access_token);
    expect(r.status).toBe(401);
  });

  it('answers unknown grant types and missing parameters per RFC 6749', async () => {
    expect((await token(stack.url, client, { grant_type: 'password' })).body.error).toBe('unsupported_grant_type');
    expect((await token(stack.url, client, { grant_type: 'authorization_code' })).body.error).toBe('invalid_request');
    const none = await fetch(`${stack.url}${FN}/oauth-token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'grant_type=refresh_token&refresh_token=x',
    });
    expect(none.status).toBe(401);
  });
});

describe('authorization errors', () => {
  it('shows a page, never a redirect, for an unregistered redirect_uri or unknown client', async () => {
    const r = await getAuthorize(stack.url, params({ redirect_uri: 'https://evil.example.test/cb' }));
    expect(r.status).toBe(400);
    expect(r.location).toBeNull();
    expect(r.headers.get('content-type')).toMatch(/^text\/html/);
    const u = await getAuthorize(stack.url, params({ client_id: '00000000-0000-7000-8000-000000000000' }));
    expect(u.status).toBe(400);
    expect(u.location).toBeNull();
  });

  it.each([
    ['unsupported_response_type', { response_type: 'token' }],
    ['invalid_scope', { scope: 'read devices:register' }],
    ['invalid_request', { code_challenge_method: 'S256' }],
  ])('redirects %s with the state', async (error, extra) => {
    const r = await getAuthorize(stack.url, params(extra));
    expect(r.status).toBe(302);
    const loc = new URL(r.location!);
    expect(loc.searchParams.get('error')).toBe(error);
    expect(loc.searchParams.get('state')).toBe('st-123');
  });

  it('redirects access_denied when the user denies', async () => {
    const page = await signIn(stack.url, params(), researcher);
    const r = await consent(stack.url, page, orgId, 'deny');
    expect(new URL(r.location!).searchParams.get('error')).toBe('access_denied');
  });

  it('redirects access_denied for an organisation the user is not a member of', async () => {
    const page = await signIn(stack.url, params(), admin);
    const r = await consent(stack.url, page, otherOrgId);
    expect(new URL(r.location!).searchParams.get('error')).toBe('access_denied');
  });

  it('refuses a form without the CSRF cookie, or with a tampered state', async () => {
    const f = formOf(await getAuthorize(stack.url, params()));
    const fields = { step: 'login', auth_state: f.auth_state, csrf_token: f.csrf_token, email: researcher.email, password };
    expect((await postForm(stack.url, fields)).status).toBe(403);
    const tampered = { ...fields, auth_state: `x${f.auth_state}` };
    expect((await postForm(stack.url, tampered, f.cookie)).status).toBe(400);
  });

  it('shows the login form again for a wrong password', async () => {
    const page = await signIn(stack.url, params(), { email: researcher.email, password: 'wrong password!!' });
    expect(page.status).toBe(401);
    expect(page.html).toContain('Invalid email or password');
    expect(page.html).toContain('name="password"');
  });
});

describe('authorization server metadata', () => {
  it('is served per RFC 8414 under the functions base', async () => {
    const r = await call(stack.url, 'GET', `${FN}/.well-known/oauth-authorization-server`);
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({
      issuer: `${stack.url}${FN}`,
      authorization_endpoint: `${stack.url}${FN}/oauth-authorize`,
      token_endpoint: `${stack.url}${FN}/oauth-token`,
      response_types_supported: ['code'],
      token_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post'],
    });
  });
});

describe('code lifetime', () => {
  let short: Stack;
  beforeAll(async () => {
    const before = process.env.IDENTITY_OAUTH_CODE_TTL_SECONDS;
    process.env.IDENTITY_OAUTH_CODE_TTL_SECONDS = '1';
    try {
      short = await startStack({ services: ['identity'] });
    } finally {
      if (before === undefined) delete process.env.IDENTITY_OAUTH_CODE_TTL_SECONDS;
      else process.env.IDENTITY_OAUTH_CODE_TTL_SECONDS = before;
    }
  });
  afterAll(async () => {
    await short?.stop();
  });

  it('refuses an expired code with invalid_grant', async () => {
    const org = (await short.admin.createOrg()).id;
    const u = await short.admin.createUser({ password });
    await short.admin.putMember(org, u.id, 'researcher');
    const c = await short.admin.call<{ client_id: string; client_secret: string }>('POST', '/oauth-clients', { name: 'c', redirect_uris: [REDIRECT] }, 201);
    const loc = await authorize(short.url, { client_id: c.client_id, redirect_uri: REDIRECT }, { email: u.email, password }, org);
    const code = loc.searchParams.get('code')!;
    // redeeming the code to poll would use it up: the wait is for identity's own clock
    // (the database's now(), which its expiry check reads) to pass the code's expiry
    const db = new Client({ connectionString: short.databaseUrl });
    await db.connect();
    try {
      await waitFor(
        'the code to expire by the database clock',
        async () =>
          (await db.query<{ expired: boolean }>('select expires_at <= now() as expired from identity.oauth_codes where code_hash = $1', [hashToken(code)]))
            .rows[0]?.expired === true,
        { timeoutMs: 5_000 },
      );
    } finally {
      await db.end();
    }
    const t = await token(short.url, c, { grant_type: 'authorization_code', code, redirect_uri: REDIRECT });
    expect(t.status).toBe(400);
    expect(t.body.error).toBe('invalid_grant');
  });
});
