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
