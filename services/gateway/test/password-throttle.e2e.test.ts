import { randomBytes, randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { startStack, type Stack } from '@lab/testing';
import { call } from './http';

let stack: Stack;
let orgId: string;
const password = 'a long enough password';

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'notebook', 'audit', 'webhooks'] });
  orgId = (await stack.admin.createOrg()).id;
});

afterAll(async () => {
  await stack?.stop();
});

const grant = (email: string, pw: string) => call(stack.url, 'POST', '/auth/v1/token', { body: { grant_type: 'password', email, password: pw } });

/** Keys of the shared Redis that contain `mark` (none to look at with counters in memory). */
async function redisKeysWith(mark: string): Promise<string[] | undefined> {
  if (!process.env.REDIS_URL) return undefined;
  const redis = new Redis(process.env.REDIS_URL);
  try {
    return await redis.keys(`*${mark}*`);
  } finally {
    redis.disconnect();
  }
}

// The re-entered password of a signature is a password attempt like a sign-in:
// with a stolen session token, it must not allow guessing at the token's rate.
describe('POST /app/v1/experiments/{id}/sign', () => {
  it('counts its password checks against the account: past 10 a minute even the right password gets 429, and so does sign-in', async () => {
    const email = `sign-throttle-${randomUUID()}@example.test`;
    const user = await stack.admin.createUser({ email, password, name: 'Signer' });
    await stack.admin.putMember(orgId, user.id, 'researcher');
    const session = await grant(email, password); // the first attempt of the minute
    expect(session.status).toBe(200);
    const pat = (await stack.admin.createPat(user.id, { scopes: ['write'], org_id: orgId })).token;
    const exp = await call(stack.url, 'POST', '/v1/experiments', { token: pat, body: { title: 'to sign' } });
    expect(exp.status).toBe(201);
    const sign = (pw: string) =>
      call(stack.url, 'POST', `/app/v1/experiments/${exp.body.data.id}/sign`, { token: session.body.access_token, body: { password: pw }, headers: { 'x-org-id': orgId } });

    for (let i = 0; i < 9; i++) {
      const wrong = await sign(`wrong guess ${i}`);
      expect([wrong.status, wrong.body.error.code]).toEqual([403, 'invalid_password']);
    }
    const limited = await sign(password);
    expect([limited.status, limited.body.error.code]).toEqual([429, 'rate_limited']);
    // one budget per account, whichever door the guesses came through
    const signIn = await grant(email, password);
    expect([signIn.status, signIn.body.error.code]).toEqual([429, 'rate_limited']);
  });

  // signing is routine work: a right password gives its count back
  it('signs a dozen entries in a minute with the right password, and the account can still sign in', async () => {
    const email = `sign-ok-${randomUUID()}@example.test`;
    const user = await stack.admin.createUser({ email, password, name: 'Signer' });
    await stack.admin.putMember(orgId, user.id, 'researcher');
    const access = (await grant(email, password)).body.access_token;
    const pat = (await stack.admin.createPat(user.id, { scopes: ['write'], org_id: orgId })).token;
    for (let i = 0; i < 12; i++) {
      const exp = await call(stack.url, 'POST', '/v1/experiments', { token: pat, body: { title: `to sign ${i}` } });
      const r = await call(stack.url, 'POST', `/app/v1/experiments/${exp.body.data.id}/sign`, { token: access, body: { password }, headers: { 'x-org-id': orgId } });
      expect(r.status).toBe(200);
      expect(r.body.data.signed_at).toEqual(expect.any(String));
    }
    expect((await grant(email, password)).status).toBe(200);
  });
});

// Anonymous requests must not each leave a counter of their own (kept an hour).
describe('counters of anonymous requests', () => {
  it('keeps no counter under a made-up e-mail address', async () => {
    const mark = `nobody${randomBytes(6).toString('hex')}`;
    const r = await grant(`${mark}@example.test`, 'some password');
    expect(r.status).toBe(400);
    const keys = await redisKeysWith(mark);
    if (keys) expect(keys).toEqual([]);
  });

  it('keeps no counter under a made-up inbound webhook address', async () => {
    const mark = `nope${randomBytes(6).toString('hex')}`;
    for (const path of [`${orgId}/${mark}`, mark]) {
      const res = await fetch(`${stack.url}/functions/v1/inbound-webhook/${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
      expect(res.status).toBe(404);
    }
    const keys = await redisKeysWith(mark);
    if (keys) expect(keys).toEqual([]);
  });
});
