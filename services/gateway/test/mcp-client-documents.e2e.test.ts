import { createHash, randomBytes } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { startHttpsDocuments, startStack, type HttpsDocuments, type Stack } from '@lab/testing';
import { call } from './http';
import { browserAuthorize, FN, type FlowUser } from './oauth-flow';
import { signedInClient, TestProvider } from './sdk-oauth-client';

/**
 * MCP clients that name themselves by a client ID metadata document (MCP
 * authorization 2025-11-25, draft-ietf-oauth-client-id-metadata-document): the
 * client_id is the https URL of a JSON document listing its redirect URIs. The
 * documents are served over HTTPS from loopback with a certificate of the test's
 * own, which the gateway trusts as its test CA; it may reach loopback only
 * because the stack allows private networks, the test switch webhook deliveries
 * have too (the guard itself refusing them is in client-documents.unit.test.ts).
 */
const REDIRECT = 'http://127.0.0.1:33418/callback';
const password = 'a long enough password';
const IDP = '/auth/v1/oauth';

let stack: Stack;
let docs: HttpsDocuments;
let orgA: string;
let user: FlowUser & { id: string };
let sampleId: string;
const mcpUrl = () => new URL(`${stack.url}${FN}/mcp`);

const clientDoc = (path: string, extra: Record<string, unknown> = {}) => ({
  client_id: docs.url(path),
  client_name: 'Document client',
  client_uri: 'https://app.example',
  redirect_uris: [REDIRECT],
  grant_types: ['authorization_code', 'refresh_token'],
  response_types: ['code'],
  token_endpoint_auth_method: 'none',
  ...extra,
});

beforeAll(async () => {
  docs = await startHttpsDocuments();
  stack = await startStack({ services: ['identity', 'notebook', 'audit'], clientDocuments: { allowPrivateNetworks: true, ca: docs.ca } });
  orgA = (await stack.admin.createOrg()).id;
  const u = await stack.admin.createUser({ password, name: 'Ada' });
  user = { id: u.id, email: u.email, password };
  await stack.admin.putMember(orgA, u.id, 'researcher');
  const key = (await stack.admin.createApiKey(orgA, { scopes: ['write'] })).token;
  const r = await call(stack.url, 'POST', '/v1/samples', { token: key, body: { name: 'Buffer A' } });
  sampleId = r.body.data.id as string;
});

afterAll(async () => {
  await stack?.stop();
  await docs?.stop();
});

it('advertises client ID metadata documents, next to dynamic registration', async () => {
  const r = await call(stack.url, 'GET', '/.well-known/oauth-authorization-server/auth/v1');
  expect(r.body).toMatchObject({ client_id_metadata_document_supported: true, registration_endpoint: `${stack.url}${IDP}/register` });
});

describe('the official SDK client with a URL client id', () => {
  let provider: TestProvider;
  let client: Client;

  beforeAll(async () => {
    docs.set('/mcp/client.json', { body: clientDoc('/mcp/client.json') });
    provider = new TestProvider(user, orgA, REDIRECT, docs.url('/mcp/client.json'));
    client = await signedInClient(mcpUrl(), provider);
  });
  afterAll(async () => {
    await client?.close();
  });

  it('signs in without registering: the authorization request names the document URL', async () => {
    expect(provider.registrations).toBe(0);
    expect(provider.info?.client_id).toBe(docs.url('/mcp/client.json'));
    const url = provider.authorizationUrl!;
    expect(`${url.origin}${url.pathname}`).toBe(`${stack.url}${IDP}/authorize`);
    expect(url.searchParams.get('client_id')).toBe(docs.url('/mcp/client.json'));
    expect(url.searchParams.get('code_challenge_method')).toBe('S256');
    // the user was shown the host serving the document, and the name it gives
    expect(provider.consentHtml).toContain('Document client');
    expect(provider.consentHtml).toContain(`described by its own document at <strong>${new URL(docs.url('/')).host}</strong>`);
    expect(provider.saved).toMatchObject({ access_token: expect.stringMatching(/^oat_/), refresh_token: expect.stringMatching(/^ort_/) });
    expect(docs.hits('/mcp/client.json')).toBe(1);
    // the operator sees it among the OAuth clients, public, with its document's URL
    const listed = await stack.admin.call<{ client_id: string; metadata_url?: string }[]>('GET', '/oauth-clients?limit=100', undefined, 200);
    const mine = listed.find((c) => c.metadata_url === docs.url('/mcp/client.json'));
    expect(mine).toMatchObject({ name: 'Document client', public: true, redirect_uris: [REDIRECT] });
    const one = await stack.admin.call('GET', `/oauth-clients/${mine!.client_id}`, undefined, 200);
    expect(one).toEqual(mine);
  });

  it('reads a record as a resource, as the HTTP API renders it', async () => {
    const read = await client.readResource({ uri: `lab://samples/${sampleId}` });
    const content = read.contents[0] as { uri: string; mimeType: string; text: string };
    expect(content).toMatchObject({ uri: `lab://samples/${sampleId}`, mimeType: 'application/json' });
    const key = (await stack.admin.createApiKey(orgA, { scopes: ['read'] })).token;
    const http = await call(stack.url, 'GET', `/v1/samples/${sampleId}`, { token: key });
    expect(JSON.parse(content.text)).toEqual(http.body.data);
  });

  it('refreshes its token at the token endpoint under the same client id', async () => {
    const before = provider.saved!;
    provider.saved = { ...before, access_token: `oat_${randomBytes(32).toString('base64url')}` };
    expect((await client.listResourceTemplates()).resourceTemplates.length).toBeGreaterThan(0);
    expect(provider.saved.refresh_token).not.toBe(before.refresh_token);
  });
});

// ---- by hand: what the SDK never sends ----

const pkce = () => {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
};

const authorizeUrl = (clientId: string, challenge: string, redirect = REDIRECT) =>
  new URL(
    `${stack.url}${IDP}/authorize?${new URLSearchParams({
      response_type: 'code',
      client_id: clientId,
      redirect_uri: redirect,
      code_challenge: challenge,
      code_challenge_method: 'S256',
      state: 's',
    }).toString()}`,
  );

const idpToken = (fields: Record<string, string>) =>
  call(stack.url, 'POST', `${IDP}/token`, {
    body: new URLSearchParams(fields).toString(),
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
  });

describe('the authorization endpoint with a URL client id', () => {
  it.each([
    ['a document naming another client_id', '/other.json', { client_id: 'https://elsewhere.example/client.json' }, 'does not name its own URL'],
    ['a document without this redirect URI', '/no-redirect.json', { redirect_uris: ['http://127.0.0.1:1/else'] }, 'redirect_uri is missing or not registered'],
    ['a document with a custom-scheme redirect URI', '/custom.json', { redirect_uris: ['myapp://cb'] }, 'invalid_redirect_uri'],
    ['a document holding a secret', '/secret.json', { client_secret: 'x' }, 'holds a client secret'],
    ['no document at all', '/missing.json', undefined, 'answered 404'],
  ])('refuses %s with an error page, no redirect', async (_n, path, extra, message) => {
    if (extra) docs.set(path, { body: clientDoc(path, extra) });
    const res = await fetch(authorizeUrl(docs.url(path), pkce().challenge), { redirect: 'manual' });
    expect([res.status, res.headers.get('location')]).toEqual([400, null]);
    const html = await res.text();
    expect(html).toContain(message.replace(/'/g, '&#39;'));
  });

  it('refuses a client id URL that is not https, or has no path', async () => {
    for (const id of [`http://localhost/client.json`, docs.url('/')]) {
      const res = await fetch(authorizeUrl(id, pkce().challenge), { redirect: 'manual' });
      expect(res.status).toBe(400);
      expect(await res.text()).toContain('invalid_client');
    }
  });

  it('issues a code the token endpoint exchanges only for the same client id', async () => {
    docs.set('/by-hand.json', { body: clientDoc('/by-hand.json', { client_name: 'By hand' }) });
    docs.set('/other-client.json', { body: clientDoc('/other-client.json') });
    const clientId = docs.url('/by-hand.json');
    // the other client is known to the server too (it has been to the authorization endpoint)
    expect((await fetch(authorizeUrl(docs.url('/other-client.json'), pkce().challenge), { redirect: 'manual' })).status).toBe(200);
    const { verifier, challenge } = pkce();
    const done = await browserAuthorize(authorizeUrl(clientId, challenge), user, orgA);
    expect(done.location).toMatch(/^http:\/\/127\.0\.0\.1:33418\/callback\?code=/);
    const code = new URL(done.location!).searchParams.get('code')!;
    const base = { grant_type: 'authorization_code', code, redirect_uri: REDIRECT, code_verifier: verifier };
    const unknown = await idpToken({ ...base, client_id: docs.url('/never-seen.json') });
    expect([unknown.status, unknown.body.error]).toEqual([401, 'invalid_client']);
    const other = await idpToken({ ...base, client_id: docs.url('/other-client.json') });
    expect([other.status, other.body.error]).toEqual([400, 'invalid_grant']);
  });

  it('still lets older clients register (dynamic registration is kept)', async () => {
    const r = await call(stack.url, 'POST', `${IDP}/register`, { body: { client_name: 'old', redirect_uris: [REDIRECT] } });
    expect(r.status).toBe(201);
  });
});
