import { randomBytes, randomUUID } from 'node:crypto';
import { createLogger, DomainError } from '@lab/kit';
import { inboundKey, inboundWebhookHandler, INBOUND_BUCKETS, INBOUND_LIMITS } from '../src/handlers/webhooks';
import { countedSignIn, RateLimiter, SIGN_IN_BUCKETS, type Limits } from '../src/rate-limit';
import type { Ctx, Deps } from '../src/request';

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

  describe('inbound webhooks', () => {
    const org = randomUUID();
    const realSlug = `real${randomBytes(8).toString('hex')}`;

    function setup() {
      const { limiter, keys } = recordingLimiter();
      const calls: string[] = [];
      const webhooks = {
        call: async (_method: string, req: { org_id?: string; slug: string }) => {
          calls.push(req.slug);
          if (req.slug !== realSlug || req.org_id?.toLowerCase() !== org) throw DomainError.notFound('inbound webhook endpoint not found');
          return { event_id: randomUUID(), duplicate: false };
        },
      };
      const deps = { log, limiter, clients: { webhooks: () => webhooks } } as unknown as Deps;
      const send = (slug: string, orgId: string | undefined = org) =>
        inboundWebhookHandler(
          {
            req: { headers: {} },
            params: orgId === undefined ? { slug } : { org_id: orgId, slug },
            requestId: randomUUID(),
            body: Buffer.from('{}'),
          } as unknown as Ctx,
          deps,
        ).then(
          (r) => r.status,
          (e: DomainError) => e.kind,
        );
      return { limiter, keys, calls, send };
    }

    it('keep no counter per made-up address: they fall into a bounded set of buckets', async () => {
      const { limiter, keys, send } = setup();
      const slugs = Array.from({ length: 500 }, () => `nope${randomBytes(8).toString('hex')}`);
      for (const s of slugs) expect(await send(s)).toBe('not_found');
      for (const s of slugs.slice(0, 50)) expect(await send(s, undefined)).toBe('not_found'); // the short path too
      for (const k of keys) {
        expect(k).toMatch(/^inbound:[0-9a-f]+$/);
        expect(parseInt(k.slice('inbound:'.length), 16)).toBeLessThan(INBOUND_BUCKETS);
      }
      expect(keys.filter((k) => slugs.some((s) => k.includes(s)))).toEqual([]);
      await limiter.close();
    });

    it('count a real endpoint on its own counter, and answer 429 past its limit without passing the request on', async () => {
      const { limiter, keys, calls, send } = setup();
      expect(await send(realSlug)).toBe(202);
      expect(keys).toEqual([inboundKey(org, realSlug)]);
      for (let i = 1; i < INBOUND_LIMITS.per_minute; i++) expect(await send(realSlug)).toBe(202);
      expect(calls).toHaveLength(INBOUND_LIMITS.per_minute);
      expect(await send(realSlug)).toBe('rate_limited');
      expect(await send(realSlug, org.toUpperCase())).toBe('rate_limited'); // one endpoint, one counter
      expect(calls).toHaveLength(INBOUND_LIMITS.per_minute);
      // other addresses have budgets of their own
      expect(await send('nope-other')).toBe('not_found');
      await limiter.close();
    });
  });
});
