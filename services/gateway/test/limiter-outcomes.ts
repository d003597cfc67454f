import type { DomainError } from '@lab/kit';
import type { RateLimiter } from '../src/rate-limit';

/** What `n` requests under `limits` meet, in order: 'ok' or the refusal's code. */
export async function outcomes(limiter: RateLimiter, key: string, limits: { per_minute: number; per_hour: number }, n: number): Promise<string[]> {
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
