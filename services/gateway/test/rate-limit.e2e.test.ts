import { startStack, type Stack } from '@lab/testing';
import { call } from './http';

let stack: Stack;

beforeAll(async () => {
  stack = await startStack();
});

afterAll(async () => {
  await stack?.stop();
});

it('limits a token to its organisation per-minute rate and answers 429 with Retry-After 60', async () => {
  const org = await stack.admin.createOrg({ rate_limit: { per_minute: 5, per_hour: 1000 } });
  const token = (await stack.admin.createApiKey(org.id, { scopes: ['read'] })).token;
  const remaining: string[] = [];
  for (let i = 0; i < 5; i++) {
    const r = await call(stack.url, 'GET', '/v1/samples', { token });
    expect(r.status).toBe(200);
    expect(r.headers.get('x-ratelimit-limit')).toBe('5');
    remaining.push(r.headers.get('x-ratelimit-remaining')!);
  }
  expect(remaining).toEqual(['4', '3', '2', '1', '0']);
  const over = await call(stack.url, 'GET', '/v1/samples', { token });
  expect(over.status).toBe(429);
  expect(over.headers.get('retry-after')).toBe('60');
  expect(over.headers.get('x-ratelimit-limit')).toBe('5');
  expect(over.headers.get('x-ratelimit-remaining')).toBe('0');
  expect(over.body.error.code).toBe('rate_limited');

  // Another token of the same organisation has its own budget.
  const other = (await stack.admin.createApiKey(org.id, { scopes: ['read'] })).token;
  expect((await call(stack.url, 'GET', '/v1/samples', { token: other })).status).toBe(200);
});

it('uses the default limits of 120 per minute', async () => {
  const org = await stack.admin.createOrg();
  const token = (await stack.admin.createApiKey(org.id, { scopes: ['read'] })).token;
  const r = await call(stack.url, 'GET', '/v1/ping', { token });
  expect(r.headers.get('x-ratelimit-limit')).toBe('120');
  expect(r.headers.get('x-ratelimit-remaining')).toBe('119');
});

it('counts reads that run beside their count exactly: a burst past the limit gets 429 for every request over it', async () => {
  const org = await stack.admin.createOrg({ rate_limit: { per_minute: 20, per_hour: 1000 } });
  const token = (await stack.admin.createApiKey(org.id, { scopes: ['read', 'write'] })).token;
  // the first read waits for its count; it leaves room, so the next reads overlap theirs
  expect((await call(stack.url, 'GET', '/v1/samples', { token })).headers.get('x-ratelimit-remaining')).toBe('19');
  const burst = await Promise.all(Array.from({ length: 25 }, () => call(stack.url, 'GET', '/v1/samples', { token })));
  const statuses = burst.map((r) => r.status).sort();
  expect(statuses.filter((s) => s === 200)).toHaveLength(19);
  expect(statuses.filter((s) => s === 429)).toHaveLength(6);
  for (const r of burst) expect(r.headers.get('x-ratelimit-limit')).toBe('20');
  expect(
    burst
      .map((r) => Number(r.headers.get('x-ratelimit-remaining')))
      .sort((a, b) => a - b)
      .slice(-1)[0],
  ).toBe(18);
  // a read refused by its scope or not found still carries the count; over the limit, 429 wins
  const other = await stack.admin.createOrg({ rate_limit: { per_minute: 10, per_hour: 1000 } });
  const reader = (await stack.admin.createApiKey(other.id, { scopes: ['read'] })).token;
  const first = await call(stack.url, 'GET', '/v1/samples/00000000-0000-4000-8000-000000000000', { token: reader });
  expect([first.status, first.headers.get('x-ratelimit-remaining')]).toEqual([404, '9']);
  const overlapped = await call(stack.url, 'GET', '/v1/samples/00000000-0000-4000-8000-000000000000', { token: reader });
  expect([overlapped.status, overlapped.headers.get('x-ratelimit-remaining')]).toEqual([404, '8']);
  for (let i = 0; i < 8; i++) await call(stack.url, 'GET', '/v1/samples', { token: reader });
  const over = await call(stack.url, 'GET', '/v1/samples/00000000-0000-4000-8000-000000000000', { token: reader });
  expect([over.status, over.body.error.code]).toEqual([429, 'rate_limited']);
});

// the probe: after the change the fifth request of the hour was refused, and the
// headers had said 995 requests were left
it('counts the requests before a change of the limits toward the new ones, and its headers say what the next request gets', async () => {
  const org = await stack.admin.createOrg();
  const token = (await stack.admin.createApiKey(org.id, { scopes: ['read'] })).token;
  const told = async (n: number) => {
    const out: string[] = [];
    for (let i = 0; i < n; i++) {
      const r = await call(stack.url, 'GET', '/v1/samples', { token });
      out.push(`${r.status} ${r.headers.get('x-ratelimit-limit')}/${r.headers.get('x-ratelimit-remaining')}`);
    }
    return out;
  };
  const limit = (rate_limit: { per_minute: number; per_hour: number }) => stack.admin.call('PATCH', `/orgs/${org.id}`, { rate_limit }, 200);

  expect(await told(1)).toEqual(['200 120/119']);
  await limit({ per_minute: 1000, per_hour: 5 });
  // the hour has counted one: four more pass, and the headers say so from the first
  expect(await told(5)).toEqual(['200 5/3', '200 5/2', '200 5/1', '200 5/0', '429 5/0']);
  // raised: the five that passed stand, the refused one was not counted
  await limit({ per_minute: 1000, per_hour: 7 });
  expect(await told(3)).toEqual(['200 7/1', '200 7/0', '429 7/0']);
  // the minute's edge after a change: 3 per minute, of which 7 were counted; then raised again
  await limit({ per_minute: 3, per_hour: 100 });
  expect(await told(1)).toEqual(['429 3/0']);
  await limit({ per_minute: 9, per_hour: 100 });
  expect(await told(3)).toEqual(['200 9/1', '200 9/0', '429 9/0']);
});
