import { createHash, randomBytes } from 'node:crypto';
import { startStack, type Stack } from '@lab/testing';
import { call } from './http';
import { checkerFor } from './openapi-responses';
import { FN, formOf, type FlowUser, type Page } from './oauth-flow';

/**
 * Where the authorization endpoints send a browser, and how often a form may do
 * it: no redirect to a self-registered client's URI before the user has acted
 * (RFC 9700 4.11.2), redirect URIs that read as the host they go to, a consent
 * form that is spent once (across gateway replicas), and the issuer in every
 * authorization response (RFC 9207).
 */
const IDP = '/auth/v1/oauth';
const password = 'a long enough password';
const ATTACKER = 'https://attacker.example/cb';
const REDIRECT = 'https://lab-client.example.org/callback';

let stack: Stack;
let orgId: string;

beforeAll(async () => {
  // the loopback proxy is trusted so each registration can come from an address of its own (10 a minute each)
  stack = await startStack({ services: ['identity'], trustProxy: ['loopback'] });
  orgId = (await stack.admin.createOrg()).id;
});

afterAll(async () => {
  await stack?.stop();
});

/** A page or redirect as a browser gets it (redirects not followed), checked against the OpenAPI document. */
async function fetchPage(url: string, init: RequestInit = {}): Promise<Page> {
  const res = await fetch(url, { ...init, redirect: 'manual' });
  const html = await res.text();
  const u = new URL(url);
  checkerFor(stack.url).check({
    method: init.method ?? 'GET',
    path: u.pathname,
    status: res.status,
    contentType: res.headers.get('content-type'),
    text: html,
    location: res.headers.get('location'),
  });
  return { status: res.status, headers: res.headers, html, location: res.headers.get('location') };
}

let registrations = 0;
const register = (redirect_uris: string[]) =>
  call(stack.url, 'POST', `${IDP}/register`, {
    body: { client_name: 'probe', redirect_uris },
    headers: { 'x-forwarded-for': `198.51.100.${++registrations}` },
  });

/** A new member for each sign-in: the sign-in form counts password attempts per account. */
async function newUser(): Promise<FlowUser> {
  const u = await stack.admin.createUser({ password });
  await stack.admin.putMember(orgId, u.id, 'researcher');
  return { email: u.email, password };
}

async function publicClient(redirectUri: string): Promise<string> {
  const r = await register([redirectUri]);
  expect(r.status).toBe(201);
  return r.body.client_id as string;
}

const challenge = () => createHash('sha256').update(randomBytes(32).toString('base64url')).digest('base64url');

const idpAuthorizeUrl = (base: string, params: Record<string, string>) =>
  `${base}${IDP}/authorize?${new URLSearchParams({
    response_type: 'code',
    scope: 'read',
    state: 'attacker-state',
    code_challenge: challenge(),
    code_challenge_method: 'S256',
    ...params,
  }).toString()}`;

/** Posts a rendered form back to `base`'s endpoint with its hidden fields and CSRF cookie. */
function submit(base: string, path: string, form: ReturnType<typeof formOf>, fields: Record<string, string>): Promise<Page> {
  return fetchPage(`${base}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: form.cookie },
    body: new URLSearchParams({ auth_state: form.auth_state, csrf_token: form.csrf_token, ...fields }).toString(),
  });
}

/** The login page, then the consent page of a signed-in user. */
async function consentPage(authorizeUrl: string, path = `${IDP}/authorize`): Promise<Page> {
  const login = await fetchPage(authorizeUrl);
  expect(login.status).toBe(200);
  const user = await newUser();
  const page = await submit(stack.url, path, formOf(login), { step: 'login', email: user.email, password: user.password });
  expect(page.status).toBe(200);
  return page;
}

describe('no redirect to a self-registered client before the user has acted (RFC 9700 4.11.2)', () => {
  it.each([
    ['an unknown scope', { scope: 'nope' }, 'invalid_scope'],
    ['PKCE plain', { code_challenge_method: 'plain' }, 'invalid_request'],
    ['another response type', { response_type: 'x' }, 'unsupported_response_type'],
    ['another resource', { resource: 'https://elsewhere.example/mcp' }, 'invalid_target'],
  ])('shows an error page, not a 302 to the registered URI, for %s', async (_n, params, error) => {
    const clientId = await publicClient(ATTACKER);
    const r = await fetchPage(idpAuthorizeUrl(stack.url, { client_id: clientId, redirect_uri: ATTACKER, ...params }));
    expect(r.location).toBeNull();
    expect(r.status).toBe(400);
    expect(r.headers.get('content-type')).toMatch(/^text\/html/);
    expect(r.html).toContain(error);
    // nothing on the page takes the browser there either
    expect(r.html).not.toContain('attacker.example');
    expect(r.html).not.toContain('attacker-state');
  });

  it('still redirects once the user has acted: a denial goes back to the client', async () => {
    const clientId = await publicClient(ATTACKER);
    const page = await consentPage(idpAuthorizeUrl(stack.url, { client_id: clientId, redirect_uri: ATTACKER }));
    const denied = await submit(stack.url, `${IDP}/authorize`, formOf(page), { step: 'consent', org_id: orgId, decision: 'deny' });
    expect(denied.status).toBe(302);
    const loc = new URL(denied.location!);
    expect([loc.origin + loc.pathname, loc.searchParams.get('error'), loc.searchParams.get('state')]).toEqual([ATTACKER, 'access_denied', 'attacker-state']);
  });
});

describe('redirect URIs read as the host they send the browser to', () => {
  it.each([
    ['a backslash before @', 'https://attacker.example\\@lab.example.org/callback'],
    ['a backslash in the path', 'https://lab.example.org\\callback'],
    ['CR LF', 'https://lab.example.org/callback\r\nSet-Cookie: x=y'],
    ['a tab', 'https://lab.example.org/call\tback'],
    ['DEL', 'https://lab.example.org/callback\u007f'],
  ])('registration refuses %s (invalid_redirect_uri)', async (_n, uri) => {
    const r = await register([uri]);
    expect(r.status).toBe(400);
    expect(r.body).toEqual({ error: 'invalid_redirect_uri', error_description: expect.any(String) });
  });

  it('the management API refuses them too (validation_failed)', async () => {
    for (const uri of ['https://attacker.example\\@lab.example.org/callback', 'https://lab.example.org/cb\r\n']) {
      const r = await call(stack.url, 'POST', '/admin/v1/oauth-clients', { token: stack.operatorToken, body: { name: 'x', redirect_uris: [uri] } });
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe('validation_failed');
    }
  });

  it('stores the parsed, normalised URI; the URI as registered still matches; the consent page names the host', async () => {
    const given = 'https://LAB-Client.Example.org:443/a/../callback';
    const r = await register([given]);
    expect(r.status).toBe(201);
    expect(r.body.redirect_uris).toEqual([REDIRECT]);
    const listed = await stack.admin.call<{ redirect_uris: string[] }>('GET', `/oauth-clients/${r.body.client_id}`, undefined, 200);
    expect(listed.redirect_uris).toEqual([REDIRECT]);
    const page = await consentPage(idpAuthorizeUrl(stack.url, { client_id: r.body.client_id, redirect_uri: given }));
    expect(page.html).toContain('<strong>lab-client.example.org</strong>');
    const done = await submit(stack.url, `${IDP}/authorize`, formOf(page), { step: 'consent', org_id: orgId, decision: 'allow' });
    expect(done.status).toBe(302);
    expect(done.location!.startsWith(`${REDIRECT}?code=`)).toBe(true);
  });
});

describe('a consent form is spent once', () => {
  let clientId: string;
  beforeAll(async () => {
    clientId = await publicClient(REDIRECT);
  });
  const url = () => idpAuthorizeUrl(stack.url, { client_id: clientId, redirect_uri: REDIRECT, state: 's' });
  const decide = (base: string, page: Page, decision: string) => submit(base, `${IDP}/authorize`, formOf(page), { step: 'consent', org_id: orgId, decision });

  it('gives one code; the same form again is a 403 page, no redirect', async () => {
    const page = await consentPage(url());
    const first = await decide(stack.url, page, 'allow');
    expect(first.status).toBe(302);
    expect(new URL(first.location!).searchParams.get('code')).toMatch(/^oac_/);
    for (const decision of ['allow', 'deny']) {
      const again = await decide(stack.url, page, decision);
      expect([again.status, again.location]).toEqual([403, null]);
      expect(again.html).toContain('already been used');
    }
  });

  it('after deny, the same form cannot allow', async () => {
    const page = await consentPage(url());
    const denied = await decide(stack.url, page, 'deny');
    expect(new URL(denied.location!).searchParams.get('error')).toBe('access_denied');
    const allowed = await decide(stack.url, page, 'allow');
    expect([allowed.status, allowed.location]).toEqual([403, null]);
  });

  it('holds across gateway replicas', async () => {
    const replica = await stack.replica();
    try {
      const page = await consentPage(url());
      const first = await decide(replica.url, page, 'allow');
      expect(first.status).toBe(302);
      const again = await decide(stack.url, page, 'allow');
      expect([again.status, again.location]).toEqual([403, null]);
    } finally {
      await replica.stop();
    }
  });

  it("holds for the functions base's confidential clients too", async () => {
    const c = await stack.admin.call<{ client_id: string }>('POST', '/oauth-clients', { name: 'web app', redirect_uris: [REDIRECT] }, 201);
    const path = `${FN}/oauth-authorize`;
    const page = await consentPage(
      `${stack.url}${path}?${new URLSearchParams({ response_type: 'code', client_id: c.client_id, redirect_uri: REDIRECT, scope: 'read' }).toString()}`,
      path,
    );
    const fields = { step: 'consent', org_id: orgId, decision: 'allow' };
    expect((await submit(stack.url, path, formOf(page), fields)).status).toBe(302);
    expect((await submit(stack.url, path, formOf(page), fields)).status).toBe(403);
  });
});

describe('the authorization response names its issuer (RFC 9207)', () => {
  const issuer = () => `${stack.url}/auth/v1`;

  it('is advertised in the metadata of both authorization servers', async () => {
    for (const path of ['/.well-known/oauth-authorization-server/auth/v1', `${FN}/.well-known/oauth-authorization-server`]) {
      const r = await call(stack.url, 'GET', path);
      expect(r.body.authorization_response_iss_parameter_supported).toBe(true);
    }
  });

  it('comes with the code and with an error', async () => {
    const clientId = await publicClient(REDIRECT);
    const url = idpAuthorizeUrl(stack.url, { client_id: clientId, redirect_uri: REDIRECT });
    const allowed = await submit(stack.url, `${IDP}/authorize`, formOf(await consentPage(url)), { step: 'consent', org_id: orgId, decision: 'allow' });
    const denied = await submit(stack.url, `${IDP}/authorize`, formOf(await consentPage(url)), { step: 'consent', org_id: orgId, decision: 'deny' });
    for (const [answer, key] of [
      [allowed, 'code'],
      [denied, 'error'],
    ] as const) {
      const loc = new URL(answer.location!);
      expect(loc.searchParams.get(key)).toEqual(expect.any(String));
      expect(loc.searchParams.get('iss')).toBe(issuer());
    }
  });

  it("names the functions base at the spec's oauth-authorize, on an error redirect too", async () => {
    const c = await stack.admin.call<{ client_id: string }>('POST', '/oauth-clients', { name: 'web app', redirect_uris: [REDIRECT] }, 201);
    const r = await fetchPage(
      `${stack.url}${FN}/oauth-authorize?${new URLSearchParams({ response_type: 'token', client_id: c.client_id, redirect_uri: REDIRECT, state: 's' }).toString()}`,
    );
    expect(r.status).toBe(302);
    const loc = new URL(r.location!);
    expect([loc.searchParams.get('error'), loc.searchParams.get('iss')]).toEqual(['unsupported_response_type', `${stack.url}${FN}`]);
  });
});
