import { randomBytes, randomUUID } from 'node:crypto';
import { createLogger, DomainError } from '@lab/kit';
import { countedSignIn, RateLimiter, SIGN_IN_BUCKETS, type Limits } from '../src/rate-limit';

const log = createLogger('test', 'silent');

/** A RateLimiter (in memory) that also notes every key it is asked to count. */
function recordingLimiter(): { limiter: RateLimiter; keys: string[] } {
  const limiter = new RateLimiter(log);
  const keys: string[] = [];
  const consume = limiter.consume.bind(limiter);
  limiter.consume = (key: string, limits: Limits, kind?: 'token' | 'other') => {
    keys.push(key);
    return consume(key, limits, kind);
  };
  return { limiter, keys };
}

// Anonymous requests must not each leave a counter of their own: a flood of made-up
// addresses would grow the counters (kept up to an hour) without bound.
describe('counters of anonymous requests', () => {
  describe('sign-in attempts', () => {
    it('are counted in at most SIGN_IN_BUCKETS buckets per budget, whatever is tried, and never under the e-mail or address itself', async () => {
      const { limiter, keys } = recordingLimiter();
      const refused = () => Promise.reject(DomainError.invalid('invalid email or password', undefined, 'invalid_grant'));
      const tried: string[] = [];
      for (let i = 0; i < 2000; i++) {
        const email = `made-up-${randomBytes(8).toString('hex')}@example.test`;
        const address = `10.${i >> 8}.${i & 255}.${(i * 7) & 255}`;
        tried.push(email, address);
        await countedSignIn(limiter, { email, address }, refused).catch(() => undefined);
      }
      // three budgets: account and address, address, account
      expect(keys).toHaveLength(6000);
      for (const k of keys) {
        const m = /^sign-in(?:-pair|-address)?:([0-9a-f]+)$/.exec(k);
        expect(m).not.toBeNull();
        expect(parseInt(m![1]!, 16)).toBeLessThan(SIGN_IN_BUCKETS);
      }
      expect(keys.some((k) => tried.some((t) => k.includes(t)))).toBe(false);
      // spread over the buckets, not all in a few
      for (const prefix of ['sign-in:', 'sign-in-pair:', 'sign-in-address:']) {
        expect(new Set(keys.filter((k) => k.startsWith(prefix))).size).toBeGreaterThan(1900);
      }
      await limiter.close();
    });

    it('count one account however its address is written, past 10 a minute 429', async () => {
      const { limiter } = recordingLimiter();
      const outcomes: string[] = [];
      const email = `someone-${randomUUID()}@example.test`;
      for (const written of [email, email.toUpperCase(), ` ${email} `]) {
        for (let i = 0; i < 4; i++) {
          outcomes.push(
            await countedSignIn(limiter, { email: written, address: '192.0.2.10' }, () => Promise.reject(DomainError.invalid('no'))).then(
              () => 'ok',
              (e: DomainError) => e.kind,
            ),
          );
        }
      }
      expect(outcomes).toEqual([...Array(10).fill('invalid'), 'rate_limited', 'rate_limited']);
      await limiter.close();
    });
  });
});
