import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { createLogger } from '@lab/kit';
import { Redis } from 'ioredis';
import { RateLimitedError, RateLimiter } from '../src/rate-limit';
import { expectBudgetEdgesAcrossAChange, expectOneBudgetAcrossLimits, expectWindowsToEnd } from './limiter-outcomes';

/**
 * The limiter's counts in Redis, the store replicas share. An integration test:
 * unit tests need nothing running, and CI (.ci/run) always gives a Redis.
 */
const log = createLogger('test', 'silent');

// a personal access token acting in two organisations whose limits differ had a budget in each
it('is counted once whatever limit a request is under (in Redis)', async () => {
  assert(process.env.REDIS_URL, 'REDIS_URL names the Redis this test counts in (npm test finds it)');
  const limiter = new RateLimiter(log, process.env.REDIS_URL);
  const token = `pat-${randomBytes(8).toString('hex')}`;
  try {
    await limiter.ready();
    await expectOneBudgetAcrossLimits(limiter, token);
  } finally {
    await limiter.close();
  }
});

// the fifth request of an hour limited to 5 was refused after a change (a request
// before it counted), and the headers had said 995 were left
it('tells at each edge of both windows what the next request gets, before and after a change (in Redis)', async () => {
  assert(process.env.REDIS_URL, 'REDIS_URL names the Redis this test counts in (npm test finds it)');
  const limiter = new RateLimiter(log, process.env.REDIS_URL);
  try {
    await limiter.ready();
    await expectBudgetEdgesAcrossAChange(limiter, `pat-${randomBytes(8).toString('hex')}`);
  } finally {
    await limiter.close();
  }
});

it('keeps the hour when the minute ends, and starts both when the hour ends (in Redis)', async () => {
  assert(process.env.REDIS_URL, 'REDIS_URL names the Redis this test counts in (npm test finds it)');
  const prefix = `lab:test:rl:${randomBytes(8).toString('hex')}`;
  const limiter = new RateLimiter(log, process.env.REDIS_URL, prefix);
  const admin = new Redis(process.env.REDIS_URL);
  const token = 'pat-windows';
  try {
    await limiter.ready();
    // a window ends in Redis when its key expires; Redis's clock is not ours to
    // move, so the test removes the key as its expiry would
    await expectWindowsToEnd(limiter, token, async (window) => {
      await admin.del(`${prefix}:m:${token}`, ...(window === 'hour' ? [`${prefix}:h:${token}`] : []));
    });
  } finally {
    admin.disconnect();
    await limiter.close();
  }
});

// a token's concurrent requests cost two counter commands a turn, not two each
it('counts the requests of a key begun in the same turn together, as if one by one', async () => {
  assert(process.env.REDIS_URL, 'REDIS_URL names the Redis this test counts in (npm test finds it)');
  const limiter = new RateLimiter(log, process.env.REDIS_URL);
  const admin = new Redis(process.env.REDIS_URL);
  const token = `pat-${randomBytes(8).toString('hex')}`;
  const scripts = async () => Number(/cmdstat_evalsha:calls=(\d+)/.exec(await admin.info('commandstats'))?.[1] ?? 0);
  try {
    await limiter.ready();
    const before = await scripts();
    const outcomes = await Promise.allSettled(Array.from({ length: 30 }, () => limiter.consume(token, { per_minute: 20, per_hour: 1000 })));
    const after = await scripts();
    // one count per window for the 30, one giving back per window for the 10 refused (tests run one at a time: nothing else counts meanwhile)
    expect(after - before).toBeLessThanOrEqual(4);
    // what one-by-one counting gives: the first 20 pass, each told what is left after it; the rest are refused
    const passed = outcomes.filter((o) => o.status === 'fulfilled').map((o) => o.value.remaining);
    expect(passed).toEqual(Array.from({ length: 20 }, (_, i) => 19 - i));
    expect(outcomes.slice(20).every((o) => o.status === 'rejected' && o.reason instanceof RateLimitedError)).toBe(true);
    // the next turn's count goes on from there: the 20 that passed (the 10 refused were given back)
    await expect(limiter.consume(token, { per_minute: 40, per_hour: 1000 })).resolves.toEqual({ limit: 40, remaining: 19 });
  } finally {
    admin.disconnect();
    await limiter.close();
  }
});
