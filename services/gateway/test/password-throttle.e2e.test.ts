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

/** How many of `statuses` are each status, e.g. { 400: 60, 429: 20 }. */
const tally = (statuses: number[]) => statuses.reduce<Record<number, number>>((t, s) => ({ ...t, [s]: (t[s] ?? 0) + 1 }), {});

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
    const session = await grant(email, password); // right: not counted
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

    for (let i = 0; i < 10; i++) {
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

  it('many addresses at one account are slowed too, well past what one user mistypes: then 3 tries an address', async () => {
    const email = `distributed-${randomUUID()}@example.test`;
    await stack.admin.createUser({ email, password, name: 'Target' });
    const answers: number[] = [];
    for (let i = 0; i < 60; i++) answers.push((await grant(email, `guess ${i}`, `192.0.2.${i + 1}`)).status);
    expect(tally(answers)).toEqual({ 400: 60 });
    // the account's 60 a minute are spent: each address has 3 tries at it in the hour, those it made already included
    const more: number[] = [];
    for (let i = 0; i < 4; i++) more.push((await grant(email, `more ${i}`, '192.0.2.100')).status);
    expect(more).toEqual([400, 400, 400, 429]);
    const again: number[] = [];
    for (let i = 0; i < 3; i++) again.push((await grant(email, `again ${i}`, '192.0.2.1')).status);
    expect(again).toEqual([400, 400, 429]);
  });

  it('counts an IPv6 client by its /64: a host cannot take a fresh budget per address', async () => {
    const email = `six-${randomUUID()}@example.test`;
    await stack.admin.createUser({ email, password, name: 'Target' });
    const answers: number[] = [];
    for (let i = 0; i < 11; i++) answers.push((await grant(email, `guess ${i}`, `2001:db8:1:2::${(i + 1).toString(16)}`)).status);
    expect(answers).toEqual([...Array<number>(10).fill(400), 429]);
    expect((await grant(email, password, '2001:db8:1:3::1')).status).toBe(200);
  });
});

/** 80 wrong passwords at `email`, from 8 addresses in turn (10 each), as a distributed guesser sends them; their statuses. */
async function flood(email: string, addresses = 8, perAddress = 10): Promise<number[]> {
  const statuses: number[] = [];
  for (let i = 0; i < addresses * perAddress; i++) statuses.push((await grant(email, `guess ${i}`, `203.0.113.${150 + (i % addresses)}`)).status);
  return statuses;
}

// 80 wrong passwords from 8 addresses spent the account's budget over every address
// (60 a minute), and then the user's right password got 429 wherever it came from:
// anyone who knew the e-mail could keep its owner from signing in and from signing.
describe('a flood of wrong passwords at one account', () => {
  it('does not keep the user out: their right password signs in and signs an experiment from their address, and from a fresh one', async () => {
    const email = `flooded-${randomUUID()}@example.test`;
    const user = await stack.admin.createUser({ email, password, name: 'Flooded' });
    await stack.admin.putMember(orgId, user.id, 'researcher');
    const home = '198.51.100.80';
    const session = await grant(email, password, home);
    expect(session.status).toBe(200);
    const pat = (await stack.admin.createPat(user.id, { scopes: ['write'], org_id: orgId })).token;
    const exp = await call(stack.url, 'POST', '/v1/experiments', { token: pat, body: { title: 'signed under fire' } });
    expect(exp.status).toBe(201);

    const flooded = await flood(email);

    expect((await grant(email, password, home)).status).toBe(200);
    const signed = await call(stack.url, 'POST', `/app/v1/experiments/${exp.body.data.id}/sign`, {
      token: session.body.access_token,
      body: { password },
      headers: { 'x-org-id': orgId, 'x-forwarded-for': home },
    });
    expect(signed.status).toBe(200);
    expect((await grant(email, password, '198.51.100.81')).status).toBe(200);
    // of the guesser's 80 attempts, the account's 60 a minute were checked and the rest refused, as before
    expect(tally(flooded)).toEqual({ 400: 60, 429: 20 });
  });

  it('keeps guessing limited: the flooding addresses get 429 even for the right password, a fresh address 3 tries', async () => {
    const email = `guessed-${randomUUID()}@example.test`;
    await stack.admin.createUser({ email, password, name: 'Guessed' });
    expect(tally(await flood(email))).toEqual({ 400: 60, 429: 20 });
    // a guesser learns nothing at an address that flooded
    for (let a = 0; a < 8; a++) expect((await grant(email, password, `203.0.113.${150 + a}`)).status).toBe(429);
    // a fresh address, while the account's budget is spent: three passwords are checked, then 429 whatever is sent
    const fresh = '198.51.100.90';
    const tries: number[] = [];
    for (let i = 0; i < 3; i++) tries.push((await grant(email, `another guess ${i}`, fresh)).status);
    tries.push((await grant(email, password, fresh)).status);
    expect(tries).toEqual([400, 400, 400, 429]);
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
