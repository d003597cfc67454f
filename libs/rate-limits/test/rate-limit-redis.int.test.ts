import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { createLogger } from '@lab/kit';
import { RateLimiter } from '../src/rate-limit';
import { expectOneBudgetAcrossLimits } from './limiter-outcomes';

/**
 * The limiter's counts in Redis, the store replicas share. An integration test:
 * unit tests need nothing running, and CI (.ci/run) always gives a Redis.
 */
const log = createLogger('test', 'silent');

// a personal access token acting in two organisations whose limits differ had a budget in each
it('is counted once whatever limit a request is under (in Redis)', async () => {
  assert(process.env.REDIS_URL, 'REDIS_URL names the Redis this test counts in (.ci/run sets it)');
  const limiter = new RateLimiter(log, process.env.REDIS_URL);
  const token = `pat-${randomBytes(8).toString('hex')}`;
  try {
    await limiter.ready();
    await expectOneBudgetAcrossLimits(limiter, token);
  } finally {
    await limiter.close();
  }
});
