import type { DomainError } from '@lab/kit';
import type { RateLimitedError, RateLimiter } from '../src/rate-limit';

/** What `n` requests under `limits` meet, in order: 'ok' or the refusal's code. */
async function outcomes(limiter: RateLimiter, key: string, limits: { per_minute: number; per_hour: number }, n: number): Promise<string[]> {
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    out.push(
      await limiter.consume(key, limits).then(
        () => 'ok',
        (e: DomainError) => e.code,
      ),
    );
  }
  return out;
}

/**
 * A token acting in two organisations whose limits differ (a personal access
 * token) has one budget, counted once whatever limit a request is under: 5 of
 * 5/min then 1 of 6/min pass, and back under 5/min it is refused. Asserted on
 * the limiter's store, in memory or in Redis.
 */
export async function expectOneBudgetAcrossLimits(limiter: RateLimiter, token: string): Promise<void> {
  const inA = await outcomes(limiter, token, { per_minute: 5, per_hour: 100 }, 5);
  const inB = await outcomes(limiter, token, { per_minute: 6, per_hour: 100 }, 5);
  expect([...inA, ...inB]).toEqual([...Array<string>(6).fill('ok'), ...Array<string>(4).fill('rate_limited')]);
  // and back in A, whose limit is the lower one
  expect(await outcomes(limiter, token, { per_minute: 5, per_hour: 100 }, 1)).toEqual(['rate_limited']);
}

/** What `n` requests under `limits` are told, in order: the headers' `limit/remaining`, and `429` when refused. */
async function told(limiter: RateLimiter, key: string, limits: { per_minute: number; per_hour: number }, n: number): Promise<string[]> {
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    out.push(
      await limiter.consume(key, limits).then(
        (s) => `${s.limit}/${s.remaining}`,
        (e: RateLimitedError) => `429 ${e.state.limit}/${e.state.remaining}`,
      ),
    );
  }
  return out;
}

/**
 * The edges of both windows, before and after the organisation's limits change
 * (a request is counted under the limits it meets; the counts are the token's,
 * so the requests before a change count toward the new limits). At each step
 * the state (the X-RateLimit-* headers) says what the next request gets:
 * Remaining is what is left of the window with less left, Limit is that
 * window's limit. A refused request uses no budget. Asserted on the limiter's
 * store, in memory or in Redis, with keys of its own.
 */
export async function expectBudgetEdgesAcrossAChange(limiter: RateLimiter, prefix: string): Promise<void> {
  // the probe's case: one request under the defaults, then 1000/min and 5/h; the hour has 4 left
  const probe = `${prefix}-probe`;
  expect(await told(limiter, probe, { per_minute: 120, per_hour: 5000 }, 1)).toEqual(['120/119']);
  expect(await told(limiter, probe, { per_minute: 1000, per_hour: 5 }, 6)).toEqual(['5/3', '5/2', '5/1', '5/0', '429 5/0', '429 5/0']);

  // the hour's edge from the start: exactly 5 pass, the 6th is refused
  const hour = `${prefix}-hour`;
  expect(await told(limiter, hour, { per_minute: 1000, per_hour: 5 }, 6)).toEqual(['5/4', '5/3', '5/2', '5/1', '5/0', '429 5/0']);
  // raised: what the hour has counted (5 passed, the refused one is not counted) stands
  expect(await told(limiter, hour, { per_minute: 1000, per_hour: 7 }, 3)).toEqual(['7/1', '7/0', '429 7/0']);

  // the minute's edge, before and after a change, and what it leaves of the hour
  const minute = `${prefix}-minute`;
  expect(await told(limiter, minute, { per_minute: 3, per_hour: 100 }, 4)).toEqual(['3/2', '3/1', '3/0', '429 3/0']);
  expect(await told(limiter, minute, { per_minute: 5, per_hour: 100 }, 3)).toEqual(['5/1', '5/0', '429 5/0']);
  // lowered below the count: refused at once, the refusals given back; the hour then binds
  expect(await told(limiter, minute, { per_minute: 2, per_hour: 100 }, 1)).toEqual(['429 2/0']);
  expect(await told(limiter, minute, { per_minute: 1000, per_hour: 7 }, 3)).toEqual(['7/1', '7/0', '429 7/0']);
}

/**
 * The windows' ends: when the minute ends the hour's count stays (and binds the
 * headers once it has less left); a request refused by the hour is refused
 * again in the next minute, and named by the hour's limit; when the hour ends
 * both start again. `end` ends a window of `key` as its clock would.
 */
export async function expectWindowsToEnd(limiter: RateLimiter, key: string, end: (window: 'minute' | 'hour') => Promise<void>): Promise<void> {
  const limits = { per_minute: 3, per_hour: 5 };
  expect(await told(limiter, key, limits, 4)).toEqual(['3/2', '3/1', '3/0', '429 3/0']);
  await end('minute');
  // 3 of the hour's 5 were counted (the refused one was not): 2 pass, told by the hour
  expect(await told(limiter, key, limits, 3)).toEqual(['5/1', '5/0', '429 5/0']);
  await end('minute');
  expect(await told(limiter, key, limits, 1)).toEqual(['429 5/0']);
  await end('hour');
  expect(await told(limiter, key, limits, 1)).toEqual(['3/2']);
}
