import { startHttpsDocuments, type HttpsDocuments } from '@lab/testing';
import { ClientDocuments, documentUrlProblem } from '../src/client-documents';

/**
 * Client ID metadata documents as the identity provider reads them: fetched
 * through the webhook deliveries' SSRF guard, checked, cached for their max-age
 * within bounds, and kept when a refetch fails. The documents are served over
 * HTTPS from loopback with a certificate the fetcher trusts only as its test CA.
 */
let server: HttpsDocuments;
let clock = 1_000_000;
const now = () => clock;
const REDIRECT = 'http://127.0.0.1:33418/callback';

const docAt = (path: string, extra: Record<string, unknown> = {}) => ({
  client_id: server.url(path),
  client_name: 'Doc client',
  redirect_uris: [REDIRECT],
  ...extra,
});
const documents = (opts: Partial<ConstructorParameters<typeof ClientDocuments>[0]> = {}) =>
  new ClientDocuments({ allowPrivateNetworks: true, ca: server.ca, now, ...opts });

beforeAll(async () => {
  server = await startHttpsDocuments();
});
afterAll(async () => {
  await server.stop();
});

describe('the URL a client names itself by', () => {
  it.each([
    ['https://app.example/client.json', null],
    ['3f1c2a4e-0000-4000-8000-000000000000', undefined],
    ['http://app.example/client.json', 'a client id URL must be https'],
    ['https://app.example/', 'a client id URL has a path'],
    ['https://app.example/a/../client.json', 'a client id URL has no dot segments'],
    ['https://app.example/a/%2E%2E/client.json', 'a client id URL has no dot segments'],
    ['https://user:pw@app.example/client.json', 'a client id URL carries no credentials'],
    ['https://app.example/client.json#x', 'a client id URL has no fragment'],
  ])('%s', (url, problem) => {
    expect(documentUrlProblem(url)).toBe(problem);
  });
});

describe('fetching and checking a document', () => {
  it('answers the client the document describes', async () => {
    server.set('/ok.json', { body: docAt('/ok.json', { scope: 'read', logo_uri: 'https://x.test/l.png' }) });
    await expect(documents().resolve(server.url('/ok.json'))).resolves.toEqual({
      url: server.url('/ok.json'),
      name: 'Doc client',
      redirect_uris: [REDIRECT],
      scopes: ['read'],
    });
  });

  it.each([
    ['names another URL as its client_id', { client_id: 'https://elsewhere.example/client.json', redirect_uris: [REDIRECT] }, 'does not name its own URL'],
    ['holds a secret', { client_secret: 'x' }, 'holds a client secret'],
    ['lists a custom-scheme redirect URI', { redirect_uris: ['myapp://cb'] }, 'invalid_redirect_uri'],
    ['asks for a confidential auth method', { token_endpoint_auth_method: 'client_secret_basic' }, 'invalid_client_metadata'],
    ['is not an object', null, 'not a JSON object'],
  ])('refuses a document that %s', async (_n, body, message) => {
    const path = `/bad-${Math.random().toString(36).slice(2)}.json`;
    server.set(path, { body: body === null ? [1] : docAt(path, body) });
    await expect(documents().resolve(server.url(path))).rejects.toThrow(message);
  });

  it('refuses a document over the size limit, an error status and a broken body', async () => {
    server.set('/big.json', { body: docAt('/big.json', { padding: 'x'.repeat(6000) }) });
    await expect(documents().resolve(server.url('/big.json'))).rejects.toThrow('larger than');
    server.set('/gone.json', { status: 404, body: {} });
    await expect(documents().resolve(server.url('/gone.json'))).rejects.toThrow('answered 404');
    server.set('/broken.json', { body: '{"client_id":' });
    await expect(documents().resolve(server.url('/broken.json'))).rejects.toThrow('not JSON');
  });

  it('fetches nothing from a private address unless allowed (the webhook guard)', async () => {
    server.set('/private.json', { body: docAt('/private.json') });
    const before = server.hits('/private.json');
    await expect(documents({ allowPrivateNetworks: false }).resolve(server.url('/private.json'))).rejects.toThrow('blocked address');
    expect(server.hits('/private.json')).toBe(before);
  });

  it('trusts the server only through the CA it is given', async () => {
    server.set('/untrusted.json', { body: docAt('/untrusted.json') });
    await expect(documents({ ca: undefined }).resolve(server.url('/untrusted.json'))).rejects.toThrow('could not be fetched');
  });
});

describe('the cache', () => {
  it('keeps a document for its max-age, within bounds', async () => {
    const d = documents();
    const at = (path: string, cc: string) => server.set(path, { body: docAt(path), headers: { 'cache-control': cc } });
    at('/hour.json', 'public, max-age=3600');
    at('/short.json', 'max-age=1');
    at('/year.json', 'max-age=31536000');
    for (const p of ['/hour.json', '/short.json', '/year.json']) await d.resolve(server.url(p));
    clock += 59_000; // under the one-minute floor: /short.json still cached
    for (const p of ['/hour.json', '/short.json', '/year.json']) await d.resolve(server.url(p));
    expect([server.hits('/hour.json'), server.hits('/short.json'), server.hits('/year.json')]).toEqual([1, 1, 1]);
    clock += 3_600_000; // past the hour
    for (const p of ['/hour.json', '/short.json', '/year.json']) await d.resolve(server.url(p));
    expect([server.hits('/hour.json'), server.hits('/short.json'), server.hits('/year.json')]).toEqual([2, 2, 1]);
    clock += 24 * 3_600_000; // past the one-day ceiling
    await d.resolve(server.url('/year.json'));
    expect(server.hits('/year.json')).toBe(2);
  });

  it('uses the last good copy when a refetch fails, and waits before trying again', async () => {
    const d = documents();
    server.set('/flaky.json', { body: docAt('/flaky.json', { client_name: 'First' }), headers: { 'cache-control': 'max-age=60' } });
    expect((await d.resolve(server.url('/flaky.json'))).name).toBe('First');
    server.set('/flaky.json', { status: 503, body: {} });
    clock += 61_000;
    expect((await d.resolve(server.url('/flaky.json'))).name).toBe('First');
    expect(server.hits('/flaky.json')).toBe(2);
    await d.resolve(server.url('/flaky.json')); // within the retry pause: no fetch
    expect(server.hits('/flaky.json')).toBe(2);
    server.set('/flaky.json', { body: docAt('/flaky.json', { client_name: 'Second' }) });
    clock += 31_000;
    expect((await d.resolve(server.url('/flaky.json'))).name).toBe('Second');
  });

  it('does not count a fetch it does not make', async () => {
    const d = documents();
    server.set('/counted.json', { body: docAt('/counted.json') });
    let counted = 0;
    const count = async () => {
      counted++;
    };
    await Promise.all([d.resolve(server.url('/counted.json'), count), d.resolve(server.url('/counted.json'), count)]);
    await d.resolve(server.url('/counted.json'), count);
    expect(counted).toBe(1);
    expect(server.hits('/counted.json')).toBe(1);
  });
});
