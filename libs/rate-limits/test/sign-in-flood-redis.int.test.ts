import { strict as assert } from 'node:assert';
import { randomBytes } from 'node:crypto';
import { createLogger } from '@lab/kit';
import { RateLimiter } from '../src/rate-limit';
import { expectFloodNotToLockOut, expectOneAddressNotToSpendTheAccount } from './sign-in-flood';

const log = createLogger('test', 'silent');

// The same floods as sign-in-flood.unit.test.ts, counted in the Redis the gateway replicas share.
describe('a flood of wrong passwords at one account (in Redis)', () => {
  let limiter: RateLimiter;
  beforeEach(async () => {
    assert(process.env.REDIS_URL, 'REDIS_URL names the Redis this test counts in (npm test finds it)');
    // counters of this run only: the addresses are the same in every run, and Redis keeps an hour
    limiter = new RateLimiter(log, process.env.REDIS_URL, `lab:test:rl:${randomBytes(8).toString('hex')}`);
    await limiter.ready();
  });
  afterEach(async () => {
    await limiter.close();
  });

  it('does not lock the user out, and keeps guessing to a few tries per address', async () => {
    await expectFloodNotToLockOut(limiter);
  });

  it('cannot be sent from one address alone', async () => {
    await expectOneAddressNotToSpendTheAccount(limiter);
  });
});
