import { randomBytes, randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { startStack, type Stack } from '@lab/testing';
import { call } from './http';

let stack: Stack;
let orgId: string;
const password = 'a long enough password';

beforeAll(async () => {
  // the gateway trusts X-Forwarded-For from this machine, so a test can speak from several addresses
  stack = await startStack({ services: ['identity', 'notebook', 'audit', 'webhooks'], trustProxy: ['loopback'] });
  orgId = (await stack.admin.createOrg()).id;
});

afterAll(async () => {
  await stack?.stop();
});

const grant = (email: string, pw: string, from?: string) =>
  call(stack.url, 'POST', '/auth/v1/token', { body: { grant_type: 'password', email, password: pw }, headers: from ? { 'x-forwarded-for': from } : {} });

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
      call(stack.url, 'POST', `/app/v1/experiments/${exp.body.data.id}/sign`, {
        token: session.body.access_token,
        body: { password: pw },
        headers: { 'x-org-id': orgId },
      });

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
      const r = await call(stack.url, 'POST', `/app/v1/experiments/${exp.body.data.id}/sign`, {
        token: access,
        body: { password },
        headers: { 'x-org-id': orgId },
      });
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
      const res = await fetch(`${stack.url}/functions/v1/inbound-webhook/${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{}',
      });
      expect(res.status).toBe(404);
    }
    const keys = await redisKeysWith(mark);
    if (keys) expect(keys).toEqual([]);
  });
});

// Ten wrong passwords from anywhere locked the account for everyone (429 for the
// right password too): the budget a user meets is their own address's.
describe('sign-in budgets', () => {
  it('one address guessing at an account does not lock out the user at another address', async () => {
    const email = `lockout-${randomUUID()}@example.test`;
    await stack.admin.createUser({ email, password, name: 'Target' });
    const attacker = '203.0.113.7';
    for (let i = 0; i < 10; i++) expect((await grant(email, `guess ${i}`, attacker)).status).toBe(400);
    expect((await grant(email, password, attacker)).status).toBe(429); // the guessing address waits
    expect((await grant(email, password, '198.51.100.20')).status).toBe(200); // the user does not
  });

  it('one address spraying many accounts is stopped across them', async () => {
    const sprayer = '203.0.113.99';
    const answers: number[] = [];
    for (let i = 0; i < 31; i++) answers.push((await grant(`spray-${i}-${randomUUID()}@example.test`, 'Summer2026!', sprayer)).status);
    expect(answers.slice(0, 30).every((s) => s === 400)).toBe(true);
    expect(answers[30]).toBe(429);
  });

  it('many addresses at one account are stopped too, well past what one user mistypes', async () => {
    const email = `distributed-${randomUUID()}@example.test`;
    await stack.admin.createUser({ email, password, name: 'Target' });
    const answers: number[] = [];
    for (let i = 0; i < 61; i++) answers.push((await grant(email, `guess ${i}`, `192.0.2.${i + 1}`)).status);
    expect(answers.filter((s) => s === 429)).toEqual([429]);
    expect(answers[60]).toBe(429);
  });
});

describe('the operator door', () => {
  const asOperator = (token: string, from: string) =>
    call(stack.url, 'PATCH', `/admin/v1/orgs/${orgId}`, { token, body: { name: 'renamed' }, headers: { 'x-forwarded-for': from } }).then((r) => r.status);

  it('stalls an address guessing the operator token, even at the right token, and no other address', async () => {
    const guesser = '203.0.113.50';
    for (let i = 0; i < 10; i++) expect(await asOperator(`op_guess_${i}_${'x'.repeat(20)}`, guesser)).toBe(401);
    expect(await asOperator(`op_guess_last_${'x'.repeat(20)}`, guesser)).toBe(429);
    expect(await asOperator(stack.operatorToken, guesser)).toBe(429);
    expect(await asOperator(stack.operatorToken, '198.51.100.51')).toBe(200);
  });
});
