import { createHash, randomBytes } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { startStack, type Stack } from '@lab/testing';
import { call } from './http';
import { authorize, browserAuthorize, FN, token, type FlowUser } from './oauth-flow';
import { signedInClient, TestProvider } from './sdk-oauth-client';

/**
 * An MCP client as Claude Desktop or an IDE runs it: the official SDK's client
 * over Streamable HTTP with nothing configured but the MCP URL. It discovers the
 * authorization server from the 401, registers itself, signs the user in through
 * the identity provider (PKCE S256, resource = the MCP function) and refreshes
 * its token when the server refuses the one it holds.
 */
const REDIRECT = 'http://127.0.0.1:33418/callback';
const password = 'a long enough password';

let stack: Stack;
let orgA: string;
let orgB: string;
let user: FlowUser & { id: string };
const mark = `A-${Date.now()}`;
const mcpUrl = () => new URL(`${stack.url}${FN}/mcp`);
const IDP = '/auth/v1/oauth';

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'notebook', 'equipment', 'audit'] });
  orgA = (await stack.admin.createOrg({ modules: ['lab_equipment'] })).id;
  orgB = (await stack.admin.createOrg({ modules: ['lab_equipment'] })).id;
  const u = await stack.admin.createUser({ password, name: 'Ada' });
  user = { id: u.id, email: u.email, password };
  // two organisations: the one the tools act in is chosen at consent
  for (const o of [orgA, orgB]) await stack.admin.putMember(o, u.id, 'researcher');
  for (const [org, tag] of [
    [orgA, mark],
    [orgB, 'B'],
  ] as const) {
    const key = (await stack.admin.createApiKey(org, { scopes: ['write'] })).token;
    for (const [path, body] of [
      ['/v1/experiments', { title: `${tag} experiment`, status: 'draft' }],
      ['/v1/samples', { name: `${tag} sample` }],
      ['/v1/equipment', { name: `${tag} centrifuge` }],
    ] as const) {
      const r = await call(stack.url, 'POST', path, { token: key, body });
      if (r.status !== 201) throw new Error(`${path}: ${r.status} ${r.text}`);
    }
  }
});

afterAll(async () => {
  await stack?.stop();
});

async function tool(client: Client, name: string, args: Record<string, unknown> = {}): Promise<any> {
  const r = (await client.callTool({ name, arguments: args })) as { isError?: boolean; content: { text: string }[] };
  if (r.isError) throw new Error(`${name}: ${r.content[0]!.text}`);
  return JSON.parse(r.content[0]!.text);
}

const initialize = (accessToken: string) =>
  fetch(mcpUrl(), {
    method: 'POST',
    headers: { authorization: `Bearer ${accessToken}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
    }),
  });

describe('the official SDK client signs in by itself', () => {
  let provider: TestProvider;
  let client: Client;

  beforeAll(async () => {
    provider = new TestProvider(user, orgA, REDIRECT);
    client = await signedInClient(mcpUrl(), provider);
  });
  afterAll(async () => {
    await client?.close();
  });

  it('registered a public client and authorized at the identity provider with PKCE S256 for the MCP resource', async () => {
    expect(provider.registrations).toBe(1);
    expect(provider.info).toMatchObject({ client_id: expect.any(String), token_endpoint_auth_method: 'none', redirect_uris: [REDIRECT] });
    expect(provider.info).not.toHaveProperty('client_secret');
    // the operator sees it among the OAuth clients, marked public
    const listed = await stack.admin.call<{ public: boolean; name: string }>('GET', `/oauth-clients/${provider.info!.client_id}`, undefined, 200);
    expect(listed).toMatchObject({ name: 'SDK e2e client', public: true });
    const url = provider.authorizationUrl!;
    expect(`${url.origin}${url.pathname}`).toBe(`${stack.url}${IDP}/authorize`);
    expect(url.searchParams.get('code_challenge_method')).toBe('S256');
    expect(url.searchParams.get('resource')).toBe(mcpUrl().toString());
    expect(url.searchParams.get('scope')).toBe('read');
    // the user saw both organisations and that the client named itself
    expect(provider.consentHtml).toContain(`value="${orgB}"`);
    expect(provider.consentHtml).toContain('registered itself');
    expect(provider.consentHtml).toContain(REDIRECT);
    expect(provider.saved).toMatchObject({ access_token: expect.stringMatching(/^oat_/), refresh_token: expect.stringMatching(/^ort_/), token_type: 'bearer' });
  });

  it('lists the four tools and runs each in the organisation chosen at consent', async () => {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(['list_equipment', 'list_experiments', 'list_samples', 'whoami']);
    expect(await tool(client, 'whoami')).toMatchObject({ user_id: user.id, org_id: orgA, token_kind: 'oauth', scopes: ['read'] });
    expect((await tool(client, 'list_experiments')).data.map((r: { title: string }) => r.title)).toEqual([`${mark} experiment`]);
    expect((await tool(client, 'list_samples')).data.map((r: { name: string }) => r.name)).toEqual([`${mark} sample`]);
    expect((await tool(client, 'list_equipment')).data.map((r: { name: string }) => r.name)).toEqual([`${mark} centrifuge`]);
  });

  it('refreshes its token mid-session when the server refuses the one it holds, and the old one is retired', async () => {
    const before = provider.saved!;
    // As when the access token has expired: the server answers 401 to it.
    provider.saved = { ...before, access_token: `oat_${randomBytes(32).toString('base64url')}` };
    expect(await tool(client, 'whoami')).toMatchObject({ org_id: orgA });
    const after = provider.saved;
    expect(after.access_token).not.toBe(before.access_token);
    expect(after.refresh_token).not.toBe(before.refresh_token);
    expect(provider.registrations).toBe(1);
    // rotation ended the grant's earlier access token
    expect((await initialize(before.access_token)).status).toBe(401);
    expect((await initialize(after.access_token)).status).toBe(200);
  });

  it('holds a token for the MCP function only: /v1 refuses it', async () => {
    const r = await call(stack.url, 'GET', '/v1/ping', { token: provider.saved!.access_token });
    expect(r.status).toBe(401);
    expect(r.text).toContain('not accepted on the public API');
  });
});

describe('discovery', () => {
  it("names the identity provider as the MCP function's authorization server, with registration, PKCE S256 and public clients", async () => {
    const prm = await call(stack.url, 'GET', '/.well-known/oauth-protected-resource/functions/v1/mcp');
    expect(prm.body).toMatchObject({ resource: mcpUrl().toString(), authorization_servers: [`${stack.url}/auth/v1`] });
    for (const path of ['/.well-known/oauth-authorization-server/auth/v1', '/auth/v1/.well-known/oauth-authorization-server']) {
      const r = await call(stack.url, 'GET', path);
      expect(r.status).toBe(200);
      expect(r.body).toMatchObject({
        issuer: `${stack.url}/auth/v1`,
        authorization_endpoint: `${stack.url}${IDP}/authorize`,
        token_endpoint: `${stack.url}${IDP}/token`,
        registration_endpoint: `${stack.url}${IDP}/register`,
        code_challenge_methods_supported: ['S256'],
        token_endpoint_auth_methods_supported: ['none'],
        grant_types_supported: ['authorization_code', 'refresh_token'],
      });
    }
  });

  it("leaves the functions base metadata to the spec's confidential clients", async () => {
    const r = await call(stack.url, 'GET', `${FN}/.well-known/oauth-authorization-server`);
    expect(r.body.authorization_endpoint).toBe(`${stack.url}${FN}/oauth-authorize`);
    expect(r.body).not.toHaveProperty('registration_endpoint');
  });
});

// ---- the endpoints by hand, for what a stock client never sends ----

const register = (body: unknown) => call(stack.url, 'POST', `${IDP}/register`, { body });

const pkce = () => {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
};

async function publicClient(): Promise<string> {
  const r = await register({ client_name: 'by hand', redirect_uris: [REDIRECT] });
  expect(r.status).toBe(201);
  return r.body.client_id as string;
}

const authorizeUrl = (params: Record<string, string>) =>
  new URL(`${stack.url}${IDP}/authorize?${new URLSearchParams({ response_type: 'code', redirect_uri: REDIRECT, ...params }).toString()}`);

const idpToken = (fields: Record<string, string>, headers: Record<string, string> = {}) =>
  call(stack.url, 'POST', `${IDP}/token`, {
    body: new URLSearchParams(fields).toString(),
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
  });

describe('registration (RFC 7591)', () => {
  it('answers the registered public client', async () => {
    const r = await register({
      client_name: 'Claude',
      redirect_uris: ['https://claude.ai/api/mcp/auth_callback', 'http://localhost:6274/cb'],
      scope: 'read',
      logo_uri: 'https://x.test/l.png',
    });
    expect(r.status).toBe(201);
    expect(r.headers.get('cache-control')).toBe('no-store');
    expect(r.body).toEqual({
      client_id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      client_id_issued_at: expect.any(Number),
      client_name: 'Claude',
      redirect_uris: ['https://claude.ai/api/mcp/auth_callback', 'http://localhost:6274/cb'],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
      scope: 'read',
    });
  });

  it.each([
    ['a custom scheme', { redirect_uris: ['myapp://callback'] }, 'invalid_redirect_uri'],
    ['plain http off loopback', { redirect_uris: ['http://example.com/cb'] }, 'invalid_redirect_uri'],
    ['no redirect_uris', { client_name: 'x' }, 'invalid_redirect_uri'],
    ['too many redirect_uris', { redirect_uris: Array.from({ length: 11 }, (_, i) => `https://x.test/${i}`) }, 'invalid_redirect_uri'],
    ['a confidential auth method', { redirect_uris: [REDIRECT], token_endpoint_auth_method: 'client_secret_basic' }, 'invalid_client_metadata'],
    ['a scope beyond read', { redirect_uris: [REDIRECT], scope: 'read admin' }, 'invalid_client_metadata'],
    ['the implicit grant', { redirect_uris: [REDIRECT], grant_types: ['implicit'] }, 'invalid_client_metadata'],
    ['a name that is not text', { redirect_uris: [REDIRECT], client_name: 7 }, 'invalid_client_metadata'],
    ['an oversized document', { redirect_uris: [REDIRECT], software_statement: 'x'.repeat(20_000) }, 'invalid_client_metadata'],
    ['an array', [REDIRECT], 'invalid_client_metadata'],
  ])('refuses %s', async (_n, body, error) => {
    const r = await register(body);
    expect(r.status).toBe(400);
    expect(r.body).toEqual({ error, error_description: expect.any(String) });
  });
});

describe('authorization and token endpoint rules', () => {
  it('requires PKCE S256 and the MCP resource (errors are pages: a self-registered client is not redirected to before the user acts)', async () => {
    const clientId = await publicClient();
    const { challenge } = pkce();
    const cases: [Record<string, string>, string][] = [
      [{}, 'invalid_request'],
      [{ code_challenge: challenge, code_challenge_method: 'plain' }, 'invalid_request'],
      [{ code_challenge: challenge }, 'invalid_request'],
      [{ code_challenge: challenge, code_challenge_method: 'S256', resource: `${stack.url}/v1` }, 'invalid_target'],
      [{ code_challenge: challenge, code_challenge_method: 'S256', scope: 'write' }, 'invalid_scope'],
    ];
    for (const [params, error] of cases) {
      const res = await fetch(authorizeUrl({ client_id: clientId, state: 's', ...params }), { redirect: 'manual' });
      expect([res.status, res.headers.get('location')]).toEqual([400, null]);
      expect(await res.text()).toContain(error);
    }
  });

  it('keeps each kind of client at its own endpoints', async () => {
    const publicId = await publicClient();
    const confidential = await stack.admin.call<{ client_id: string; client_secret: string }>(
      'POST',
      '/oauth-clients',
      { name: 'web app', redirect_uris: [REDIRECT] },
      201,
    );
    const { challenge } = pkce();
    const s256 = { code_challenge: challenge, code_challenge_method: 'S256' };
    // a confidential client at the identity provider, a public one at the spec's function: an error page, no redirect
    const atIdp = await fetch(authorizeUrl({ client_id: confidential.client_id, ...s256 }), { redirect: 'manual' });
    expect(atIdp.status).toBe(400);
    expect(await atIdp.text()).toContain('unauthorized_client');
    const atFn = await fetch(
      `${stack.url}${FN}/oauth-authorize?${new URLSearchParams({ response_type: 'code', client_id: publicId, redirect_uri: REDIRECT, ...s256 }).toString()}`,
      { redirect: 'manual' },
    );
    expect(atFn.status).toBe(400);
    expect(await atFn.text()).toContain('unauthorized_client');
    // the spec's token endpoint never takes a public client, with or without a secret
    for (const secret of ['', 'guess']) {
      const r = await token(stack.url, { client_id: publicId, client_secret: secret }, { grant_type: 'refresh_token', refresh_token: 'ort_x' });
      expect([r.status, r.body.error]).toEqual([401, 'invalid_client']);
    }
    // the identity provider's token endpoint takes no secret, and no confidential client
    const withSecret = await idpToken({
      grant_type: 'refresh_token',
      refresh_token: 'ort_x',
      client_id: confidential.client_id,
      client_secret: confidential.client_secret,
    });
    expect([withSecret.status, withSecret.body.error]).toEqual([401, 'invalid_client']);
    const noSecret = await idpToken({ grant_type: 'refresh_token', refresh_token: 'ort_x', client_id: confidential.client_id });
    expect([noSecret.status, noSecret.body.error]).toEqual([401, 'invalid_client']);
  });

  it('exchanges a code only with its verifier and for its resource; a refresh names the same resource', async () => {
    const clientId = await publicClient();
    const { verifier, challenge } = pkce();
    // a native client listens on whatever loopback port is free (RFC 8252): the registered one was 33418
    const otherPort = 'http://127.0.0.1:40001/callback';
    const done = await browserAuthorize(
      authorizeUrl({ client_id: clientId, redirect_uri: otherPort, code_challenge: challenge, code_challenge_method: 'S256', resource: mcpUrl().toString() }),
      user,
      orgB,
    );
    expect(done.location).toMatch(/^http:\/\/127\.0\.0\.1:40001\/callback\?code=/);
    const code = new URL(done.location!).searchParams.get('code')!;
    const base = { grant_type: 'authorization_code', code, redirect_uri: otherPort, client_id: clientId };
    const wrongRedirect = await idpToken({ ...base, redirect_uri: REDIRECT, code_verifier: verifier });
    expect([wrongRedirect.status, wrongRedirect.body.error]).toEqual([400, 'invalid_grant']);
    const wrongTarget = await idpToken({ ...base, code_verifier: verifier, resource: `${stack.url}/v1` });
    expect([wrongTarget.status, wrongTarget.body.error]).toEqual([400, 'invalid_target']);
    const wrongVerifier = await idpToken({ ...base, code_verifier: pkce().verifier });
    expect([wrongVerifier.status, wrongVerifier.body.error]).toEqual([400, 'invalid_grant']);
    const ok = await idpToken({ ...base, code_verifier: verifier, resource: mcpUrl().toString() });
    expect(ok.status).toBe(200);
    expect(ok.body).toMatchObject({ token_type: 'bearer', scope: 'read', expires_in: 3600 });
    const refreshed = await idpToken({ grant_type: 'refresh_token', refresh_token: ok.body.refresh_token, client_id: clientId, resource: mcpUrl().toString() });
    expect(refreshed.status).toBe(200);
    const whoami = await initialize(refreshed.body.access_token);
    expect(whoami.status).toBe(200);
  });

  it("still lets a confidential client's OAuth token (not resource-bound) act on /v1 and at MCP", async () => {
    const c = await stack.admin.call<{ client_id: string; client_secret: string }>('POST', '/oauth-clients', { name: 'agent', redirect_uris: [REDIRECT] }, 201);
    const loc = await authorize(stack.url, { client_id: c.client_id, redirect_uri: REDIRECT, scope: 'read' }, user, orgA);
    const t = await token(stack.url, c, { grant_type: 'authorization_code', code: loc.searchParams.get('code')!, redirect_uri: REDIRECT });
    expect((await call(stack.url, 'GET', '/v1/ping', { token: t.body.access_token })).status).toBe(200);
    expect((await initialize(t.body.access_token)).status).toBe(200);
  });
});

describe('registration rate', () => {
  it('is limited per client address (429 in the OAuth error shape)', async () => {
    let last = 0;
    let answer: Awaited<ReturnType<typeof register>> | undefined;
    for (let i = 0; i < 11 && last !== 429; i++) {
      answer = await register({ redirect_uris: [REDIRECT] });
      last = answer.status;
    }
    expect(last).toBe(429);
    expect(answer!.body).toEqual({ error: 'temporarily_unavailable', error_description: expect.any(String) });
    expect(answer!.headers.get('retry-after')).toBe('60');
  });
});
