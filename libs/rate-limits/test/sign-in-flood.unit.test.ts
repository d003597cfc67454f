import { createLogger } from '@lab/kit';
import { RateLimiter } from '../src/rate-limit';
import { expectFloodNotToLockOut, expectOneAddressNotToSpendTheAccount } from './sign-in-flood';

const log = createLogger('test', 'silent');

// Anyone who knew an e-mail could keep its owner from signing in: 80 wrong
// passwords from 8 addresses (or 61 from one) spent the account-wide budget, and
// the right password got 429 from everywhere. (In Redis: sign-in-flood-redis.int.test.ts.)
describe('a flood of wrong passwords at one account (in memory)', () => {
  let limiter: RateLimiter;
  beforeEach(() => {
    limiter = new RateLimiter(log);
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
