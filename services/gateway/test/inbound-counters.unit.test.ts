import { randomBytes, randomUUID } from 'node:crypto';
import { createLogger, DomainError } from '@lab/kit';
import { RateLimiter } from '@lab/rate-limits';
import { inboundKey, inboundWebhookHandler, INBOUND_BUCKETS, INBOUND_LIMITS } from '../src/handlers/webhooks';
import type { Ctx, Deps } from '../src/request';

const log = createLogger('test', 'silent');

// Anonymous requests must not each leave a counter of their own: a flood of made-up
// addresses would grow the counters (kept up to an hour) without bound. (The
// sign-in doors' counters are tested with the rate limits, libs/rate-limits.)
describe('counters of anonymous requests', () => {
  describe('inbound webhooks', () => {
    const org = randomUUID();
    const realSlug = `real${randomBytes(8).toString('hex')}`;

    function setup() {
      const limiter = new RateLimiter(log);
      // the keys the limiter is asked to count
      const consume = jest.spyOn(limiter, 'consume');
      const keys = () => consume.mock.calls.map(([key]) => key);
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
      for (const k of keys()) {
        expect(k).toMatch(/^inbound:[0-9a-f]+$/);
        expect(parseInt(k.slice('inbound:'.length), 16)).toBeLessThan(INBOUND_BUCKETS);
      }
      expect(keys().filter((k) => slugs.some((s) => k.includes(s)))).toEqual([]);
      await limiter.close();
    });

    it('count a real endpoint on its own counter, and answer 429 past its limit without passing the request on', async () => {
      const { limiter, keys, calls, send } = setup();
      expect(await send(realSlug)).toBe(202);
      expect(keys()).toEqual([inboundKey(org, realSlug)]);
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
