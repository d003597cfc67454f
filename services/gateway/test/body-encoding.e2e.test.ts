import { createHmac, randomUUID } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { startStack, type Stack } from '@lab/testing';
import { call, type Answer } from './http';

/**
 * JSON text is UTF-8 (RFC 8259, 8.1). A body whose bytes are not is refused as
 * 400 invalid_json naming the offset of the first byte that is not, on every
 * route that takes JSON, and nothing is stored: decoding it with replacement
 * characters would change a notebook behind the client's back.
 */
let stack: Stack;
let orgId: string;
let token: string;
let email: string;
const password = 'a long enough password';

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'notebook', 'webhooks', 'audit'] });
  orgId = (await stack.admin.createOrg()).id;
  token = (await stack.admin.createApiKey(orgId, { scopes: ['read', 'write'] })).token;
  email = `enc-${randomUUID()}@example.test`;
  const user = await stack.admin.createUser({ email, password });
  await stack.admin.putMember(orgId, user.id, 'researcher');
});

afterAll(async () => {
  await stack?.stop();
});

/** `{"name":"` + bytes + `"}`: a JSON object whose one string holds the given bytes. */
const withName = (field: string, bytes: number[]) => Buffer.concat([Buffer.from(`{"${field}":"`), Buffer.from(bytes), Buffer.from('"}')]);
/** "Müller" as a Latin-1 client writes it: ü is the single byte 0xFC. */
const MUELLER_LATIN1 = [0x4d, 0xfc, 0x6c, 0x6c, 0x65, 0x72];
const prefixOf = (field: string) => Buffer.byteLength(`{"${field}":"`);

function expectRefusedAt(r: Answer, offset: number): void {
  expect([r.status, r.body.error.code]).toEqual([400, 'invalid_json']);
  expect(r.body.error.details).toEqual({ offset });
  expect(r.body.error.message).toContain(`offset ${offset}`);
}

/** The samples whose name a lenient decoder would have made: with a replacement character. */
const replacedSamples = async () =>
  ((await call(stack.url, 'GET', `/v1/samples?limit=500`, { token })).body.data as { name: string }[]).filter((s) => s.name.includes('\uFFFD'));

describe('the public API (/v1)', () => {
  it('refuses a Latin-1 name with the offset of its first non-UTF-8 byte and stores nothing', async () => {
    const r = await call(stack.url, 'POST', '/v1/samples', { token, body: withName('name', MUELLER_LATIN1) });
    expectRefusedAt(r, prefixOf('name') + 1);
    expect(await replacedSamples()).toEqual([]);
  });

  it('names the first of several invalid bytes, whatever the content type says its charset is', async () => {
    const body = withName('name', [0x61, 0xff, 0xfe, 0xc0, 0xaf, 0xc3]);
    const r = await call(stack.url, 'POST', '/v1/samples', { token, body, headers: { 'content-type': 'application/json; charset=iso-8859-1' } });
    expectRefusedAt(r, prefixOf('name') + 1);
  });

  it('refuses what is not UTF-8 by its rules alone: an overlong encoding, a surrogate, a cut-off sequence', async () => {
    // C0 AF is "/" overlong; ED A0 80 is the surrogate U+D800; E2 82 is a three-byte sequence cut short
    for (const bytes of [
      [0xc0, 0xaf],
      [0xed, 0xa0, 0x80],
      [0x78, 0x78, 0xe2, 0x82],
    ]) {
      const r = await call(stack.url, 'POST', '/v1/samples', { token, body: withName('name', bytes) });
      expectRefusedAt(r, prefixOf('name') + bytes.findIndex((b) => b >= 0x80));
    }
  });

  it('counts the offset in the bytes once decompressed', async () => {
    const r = await call(stack.url, 'POST', '/v1/samples', {
      token,
      body: gzipSync(withName('name', MUELLER_LATIN1)),
      headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
    });
    expectRefusedAt(r, prefixOf('name') + 1);
  });

  it('stores UTF-8 as it came, ignores one leading byte order mark, and refuses a UTF-16 one', async () => {
    const name = `Müller ${randomUUID()}`;
    const r = await call(stack.url, 'POST', '/v1/samples', { token, body: Buffer.from(JSON.stringify({ name })) });
    expect([r.status, r.body.data.name]).toEqual([201, name]);
    const bom = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(JSON.stringify({ name: `${name} bom` }))]);
    const withBom = await call(stack.url, 'POST', '/v1/samples', { token, body: bom });
    expect([withBom.status, withBom.body.data.name]).toEqual([201, `${name} bom`]);
    const utf16 = Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(JSON.stringify({ name }), 'utf16le')]);
    expectRefusedAt(await call(stack.url, 'POST', '/v1/samples', { token, body: utf16 }), 0);
  });
});

it('the management API (/admin/v1) refuses it and creates nothing', async () => {
  const name = `Müller ${randomUUID()}`;
  const body = Buffer.from(JSON.stringify({ name }), 'latin1');
  const r = await call(stack.url, 'POST', '/admin/v1/orgs', { token: stack.operatorToken, body });
  expectRefusedAt(r, Buffer.byteLength('{"name":"M'));
  const orgs = await stack.admin.call<{ name: string }[]>('GET', '/orgs?limit=200');
  expect(orgs.filter((o) => o.name.endsWith(name.slice(-36)))).toEqual([]);
});

describe('sign-in and the application API (/auth/v1, /app/v1)', () => {
  it('refuses it on the token endpoint and on a signature', async () => {
    const grant = withName('grant_type', [0x70, 0xe4, 0x73, 0x73]);
    expectRefusedAt(await call(stack.url, 'POST', '/auth/v1/token', { body: grant }), prefixOf('grant_type') + 1);

    const access = (await call(stack.url, 'POST', '/auth/v1/token', { body: { grant_type: 'password', email, password } })).body.access_token as string;
    const exp = await call(stack.url, 'POST', '/v1/experiments', { token, body: { title: 'to sign' } });
    const r = await call(stack.url, 'POST', `/app/v1/experiments/${exp.body.data.id}/sign`, {
      token: access,
      body: withName('password', [0xfc]),
      headers: { 'x-org-id': orgId },
    });
    expectRefusedAt(r, prefixOf('password'));
  });

  it('refuses it on the OAuth endpoints, in their own error shape', async () => {
    const register = await call(stack.url, 'POST', '/auth/v1/oauth/register', { body: withName('client_name', [0xfc]) });
    expect([register.status, register.body.error]).toEqual([400, 'invalid_request']);
    expect(register.body.error_description).toContain(`offset ${prefixOf('client_name')}`);
    const tokenFn = await call(stack.url, 'POST', '/functions/v1/oauth-token', { body: withName('grant_type', [0xfc]) });
    expect([tokenFn.status, tokenFn.body.error]).toEqual([400, 'invalid_request']);
    expect(tokenFn.body.error_description).toContain(`offset ${prefixOf('grant_type')}`);
  });
});

it('the functions base refuses it (MCP, with a token MCP takes)', async () => {
  const session = (await call(stack.url, 'POST', '/auth/v1/token', { body: { grant_type: 'password', email, password } })).body.access_token as string;
  const r = await call(stack.url, 'POST', '/functions/v1/mcp', {
    token: session,
    body: withName('method', [0xfc]),
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'x-org-id': orgId },
  });
  expect(r.status).toBe(400);
  expect(r.text).toContain(`offset ${prefixOf('method')}`);
});

describe('inbound webhooks', () => {
  const sign = (secret: string, raw: Buffer) => {
    const t = Math.floor(Date.now() / 1000);
    return `t=${t},v1=${createHmac('sha256', secret).update(`${t}.`).update(raw).digest('hex')}`;
  };

  it('check the signature first, then refuse a body that is not UTF-8 and store nothing', async () => {
    const ep = await stack.admin.call<{ slug: string; secret: string }>('POST', `/orgs/${orgId}/inbound-endpoints`, {}, 201);
    const externalId = `x-${randomUUID()}`;
    const good = Buffer.from(JSON.stringify({ event_type: 'order.updated', external_id: externalId, payload: { who: 'Müller' } }));
    const latin1 = Buffer.from(good.toString('utf8'), 'latin1');
    const path = `/functions/v1/inbound-webhook/${orgId}/${ep.slug}`;
    const send = (body: Buffer, signature: string) =>
      call(stack.url, 'POST', path, { body, headers: { 'content-type': 'application/json', 'x-service-signature': signature } });

    expect((await send(latin1, sign('not the secret', latin1))).status).toBe(401);
    expectRefusedAt(await send(latin1, sign(ep.secret, latin1)), latin1.indexOf(0xfc));
    // nothing was stored: the same external_id, now in UTF-8, is a new event, not a duplicate
    const stored = await send(good, sign(ep.secret, good));
    expect([stored.status, stored.body.duplicate]).toEqual([202, false]);
  });
});
