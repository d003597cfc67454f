import type { DomainError } from '@lab/kit';
import type { RateLimiter } from '../src/rate-limit';

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
