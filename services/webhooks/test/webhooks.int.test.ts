import { createHmac, timingSafeEqual } from 'node:crypto';
import { connect } from 'amqplib';
import { BUNDLED_EVENT_TYPES, webhooks } from '@lab/contracts';
import {
  AmqpBus,
  BUNDLE_CONTENT_TYPE,
  MemoryBus,
  RpcClient,
  createLogger,
  messagesIn,
  newId,
  runService,
  systemContext,
  type Bus,
  type CallerContext,
  type RunningService,
} from '@lab/kit';
import { sql } from 'drizzle-orm';
import { webhooksDefinition, type WebhooksConfig } from '@lab/webhooks';
import { purgeInboundEvents, purgeSettledDeliveries } from '../src/retention';
import { MAX_SUBSCRIPTIONS_PER_ORG } from '../src/management';
import { dropFreshDatabases, freshDatabaseUrl, uniqueExchange } from '../../../testing/src/backing';
import { eventually, Receiver } from './receiver';

const log = createLogger('test', 'silent');
const secret = 'test-secret-0123456789';
const FAST: Partial<WebhooksConfig> = { allowPrivateNetworks: true, retryDelaysMs: [100, 100, 100, 100], pollMs: 50, timeoutMs: 2_000 };

/** One webhooks service over its own database and events exchange; restartable. */
class Harness {
  bus!: Bus;
  svc?: RunningService;
  client?: RpcClient<typeof webhooks.WebhooksServiceService>;
  databaseUrl: string | undefined;
  dataDir = `/tmp/lab-webhooks-${newId()}`;

  exchange = uniqueExchange();

  async open(cfg: Partial<WebhooksConfig>): Promise<this> {
    this.databaseUrl = await freshDatabaseUrl();
    await this.start(cfg);
    return this;
  }

  /** A service start is a process start: its own broker connection, its own pool. */
  async start(cfg: Partial<WebhooksConfig>): Promise<void> {
    // the deployment's bundles (openBus): public events published together go as one message a type
    this.bus = process.env.AMQP_URL
      ? await AmqpBus.connect(process.env.AMQP_URL, this.exchange, log, { bundledTypes: BUNDLED_EVENT_TYPES })
      : new MemoryBus(log);
    this.svc = await runService(webhooksDefinition(cfg), {
      log,
      bus: this.bus,
      secret,
      databaseUrl: this.databaseUrl,
      dataDir: this.dataDir,
      grpcAddress: '127.0.0.1:0',
      poolSize: 5,
    });
    this.client?.close();
    this.client = new RpcClient(webhooks.WebhooksServiceClient, this.svc.address, { secret });
  }

  async stopService(): Promise<void> {
    this.client?.close();
    this.client = undefined;
    await this.svc?.stop();
    this.svc = undefined;
    await this.bus?.close();
  }

  async close(): Promise<void> {
    await this.stopService();
  }

  operator(org: string): CallerContext {
    return { ...systemContext(newId(), org), token_kind: 'operator' };
  }

  async subscribe(org: string, url: string, events = ['*'], extra: { secret?: string } = {}) {
    return this.client!.call('createSubscription', { org_id: org, url, events, ...extra }, this.operator(org));
  }

  async deliveries(org: string, subscription: string) {
    return (await this.client!.call('listDeliveries', { org_id: org, subscription_id: subscription, limit: 100 }, this.operator(org))).deliveries;
  }

  async publish(org: string, type: string, data: Record<string, unknown>): Promise<string> {
    const id = newId();
    await this.bus.publish([{ id, type, org_id: org, occurred_at: new Date().toISOString(), data }]);
    return id;
  }
}

function verifies(r: { headers: Record<string, unknown>; raw: Buffer }, key: string): boolean {
  const m = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(String(r.headers['x-service-signature']));
  if (!m) return false;
  const expected = createHmac('sha256', key).update(`${m[1]}.`).update(r.raw).digest();
  return timingSafeEqual(expected, Buffer.from(m[2]!, 'hex')) && Math.abs(Date.now() / 1000 - Number(m[1])) < 300;
}

let h: Harness;
const receivers: Receiver[] = [];
const receiver = async (answer?: (n: number) => number) => {
  const r = await new Receiver(answer).start();
  receivers.push(r);
  return r;
};

beforeAll(async () => {
  h = await new Harness().open(FAST);
});

afterAll(async () => {
  for (const r of receivers) await r.stop();
  await h?.close();
  await dropFreshDatabases();
});

describe('outbound deliveries', () => {
  test('an event reaches a matching subscription signed, with the envelope and headers', async () => {
    const org = newId();
    const r = await receiver();
    const sub = await h.subscribe(org, r.url, ['equipment.*'], { secret: 'my-shared-secret-123456' });
    expect(sub).toMatchObject({ url: r.url, events: ['equipment.*'], secret: 'my-shared-secret-123456', active: true });
    await h.publish(org, 'experiment.created', { id: 'not subscribed' });
    const data = { session_id: newId(), equipment_id: newId(), purpose: 'HPLC run' };
    await h.publish(org, 'equipment.usage.started', data);
    const got = await eventually(() => r.requests[0]);
    expect(got.body).toEqual({ id: expect.any(String), event: 'equipment.usage.started', org_id: org, delivered_at: expect.any(String), data });
    expect(got.headers).toMatchObject({
      'content-type': 'application/json',
      'x-service-event': 'equipment.usage.started',
      'x-service-delivery': got.body.id,
      'user-agent': expect.stringMatching(/webhooks/),
    });
    expect(verifies(got, 'my-shared-secret-123456')).toBe(true);
    const [d] = await eventually(async () => {
      const list = await h.deliveries(org, sub.id);
      return list[0]?.status === 'delivered' ? list : undefined;
    });
    expect(d).toMatchObject({ id: got.body.id, event: 'equipment.usage.started', attempts: 1, last_status_code: 200, delivered_at: expect.any(String) });
    expect(d!.next_attempt_at).toBeUndefined();
    expect(r.requests).toHaveLength(1);
  });

  test('events of another organisation and audit records are not delivered', async () => {
    const org = newId();
    const r = await receiver();
    const sub = await h.subscribe(org, r.url, ['*']);
    await h.publish(newId(), 'sample.created', { id: 'other org' });
    await h.publish(org, 'audit.record', { id: 'audit' });
    await h.publish(org, 'sample.created', { id: 'mine' });
    await eventually(() => r.requests[0]);
    const list = await eventually(async () => {
      const l = await h.deliveries(org, sub.id);
      return l[0]?.status === 'delivered' ? l : undefined;
    });
    expect(list).toHaveLength(1);
    expect(r.requests.map((x) => x.body.data.id)).toEqual(['mine']);
  });

  test('a burst fans out to every subscription once, a redelivered message adds nothing, connections are reused', async () => {
    const org = newId();
    const rs = [await receiver(), await receiver(), await receiver()];
    const subs = [];
    for (const r of rs) subs.push(await h.subscribe(org, r.url, ['sample.created']));
    const ids: string[] = [];
    for (let i = 0; i < 30; i++) ids.push(await h.publish(org, 'sample.created', { id: `s${i}` }));
    // the broker may hand a message over again (a lost ack): same message id, no new deliveries
    await h.bus.publish([{ id: ids[0]!, type: 'sample.created', org_id: org, occurred_at: new Date().toISOString(), data: { id: 's0' } }]);
    for (const [i, r] of rs.entries()) {
      await eventually(async () => {
        const l = await h.deliveries(org, subs[i]!.id);
        return l.length === 30 && l.every((d) => d.status === 'delivered') ? l : undefined;
      });
      expect(r.requests.map((x) => x.body.data.id).sort()).toEqual(ids.map((_, n) => `s${n}`).sort());
      expect(new Set(r.requests.map((x) => x.headers['x-service-delivery'])).size).toBe(30);
      expect(r.requests.every((x) => verifies(x, subs[i]!.secret))).toBe(true);
      expect(r.connections).toBeLessThan(r.requests.length);
    }
    await h.publish(org, 'sample.created', { id: 'after' });
    await eventually(() => (rs.every((r) => r.requests.length === 31) ? true : undefined));
    expect(rs.map((r) => r.requests.length)).toEqual([31, 31, 31]);
  });

  test('public events published together travel as one bundle a type and fan out one delivery each; a bundle again adds nothing', async () => {
    const org = newId();
    const r = await receiver();
    const sub = await h.subscribe(org, r.url, ['sample.created', 'experiment.*']);
    // what went to the broker: each AMQP message's content type and events
    const tapped: { contentType: string | undefined; types: string[] }[] = [];
    const amqp = process.env.AMQP_URL ? await connect(process.env.AMQP_URL) : undefined;
    try {
      if (amqp) {
        const ch = await amqp.createChannel();
        const q = await ch.assertQueue('', { exclusive: true });
        for (const b of ['sample.#', 'experiment.#']) await ch.bindQueue(q.queue, h.exchange, b);
        await ch.consume(
          q.queue,
          (m) => {
            if (!m) return;
            tapped.push({ contentType: m.properties.contentType as string | undefined, types: messagesIn(m).map((x) => x.type) });
          },
          { noAck: true },
        );
      }
      const event = (type: string, n: number) => ({ id: newId(), type, org_id: org, occurred_at: new Date().toISOString(), data: { id: `${type} ${n}` } });
      const batch = [...[1, 2, 3, 4].map((n) => event('sample.created', n)), ...[1, 2].map((n) => event('experiment.created', n))];
      expect((await h.bus.publish(batch)).refused).toEqual([]);
      const list = await eventually(async () => {
        const l = await h.deliveries(org, sub.id);
        return l.length === 6 && l.every((d) => d.status === 'delivered') ? l : undefined;
      });
      expect(list).toHaveLength(6);
      expect(r.requests.map((x) => x.body.data.id as string).sort()).toEqual(batch.map((e) => e.data.id).sort());
      expect(new Set(r.requests.map((x) => x.headers['x-service-delivery'])).size).toBe(6);
      if (amqp) {
        await eventually(() => (tapped.length === 2 ? true : undefined));
        // in either order: the two may go over different publish channels
        expect(tapped.map((t) => t.contentType)).toEqual([BUNDLE_CONTENT_TYPE, BUNDLE_CONTENT_TYPE]);
        expect(tapped.map((t) => t.types).sort((x, y) => x.length - y.length)).toEqual([Array(2).fill('experiment.created'), Array(4).fill('sample.created')]);
      }
      // the broker may hand a bundle over again (a lost ack): the same ids, no new deliveries
      await h.bus.publish(batch);
      await h.publish(org, 'sample.created', { id: 'after' });
      await eventually(() => (r.requests.length === 7 ? true : undefined));
      expect(await h.deliveries(org, sub.id)).toHaveLength(7);
    } finally {
      await amqp?.close();
    }
  });

  test('a receiver failing twice gets the third attempt with the same delivery id', async () => {
    const org = newId();
    const r = await receiver((n) => (n <= 2 ? 503 : 204));
    const sub = await h.subscribe(org, r.url, ['sample.*']);
    await h.publish(org, 'sample.status_changed', { id: newId(), old_status: 'registered', new_status: 'stored' });
    const [d] = await eventually(async () => {
      const l = await h.deliveries(org, sub.id);
      return l[0]?.status === 'delivered' ? l : undefined;
    });
    expect(r.requests).toHaveLength(3);
    expect(new Set(r.requests.map((x) => x.body.id))).toEqual(new Set([d!.id]));
    expect(new Set(r.requests.map((x) => x.headers['x-service-delivery']))).toEqual(new Set([d!.id]));
    expect(d).toMatchObject({ attempts: 3, last_status_code: 204 });
  });

  test('a receiver that always fails sees exactly five attempts; the delivery ends failed', async () => {
    const org = newId();
    const r = await receiver(() => 500);
    const sub = await h.subscribe(org, r.url, ['stock_movement.*']);
    await h.publish(org, 'stock_movement.created', { id: newId() });
    const [d] = await eventually(async () => {
      const l = await h.deliveries(org, sub.id);
      return l[0]?.status === 'failed' ? l : undefined;
    });
    expect(d).toMatchObject({ attempts: 5, last_status_code: 500 });
    expect(d!.next_attempt_at).toBeUndefined();
    expect(r.requests).toHaveLength(5);
    expect(new Set(r.requests.map((x) => x.body.id)).size).toBe(1);
  });

  test('redirects are not followed: a 3xx is a failed attempt', async () => {
    const org = newId();
    const r = await receiver((n) => (n === 1 ? 302 : 200));
    const sub = await h.subscribe(org, r.url, ['experiment.created']);
    await h.publish(org, 'experiment.created', { id: newId() });
    const [d] = await eventually(async () => {
      const l = await h.deliveries(org, sub.id);
      return l[0]?.status === 'delivered' ? l : undefined;
    });
    expect(d!.attempts).toBe(2);
  });

  test('stopping the service between attempts loses no delivery', async () => {
    const org = newId();
    const r = await receiver((n) => (n === 1 ? 500 : 200));
    const sub = await h.subscribe(org, r.url, ['sample.created']);
    // a long retry delay, so the stop surely falls between the two attempts
    await h.stopService();
    await h.start({ ...FAST, retryDelaysMs: [1_500] });
    await h.publish(org, 'sample.created', { id: newId() });
    await eventually(() => r.requests[0]);
    const pending = await eventually(async () => {
      const l = await h.deliveries(org, sub.id);
      return l[0]?.attempts === 1 ? l[0] : undefined;
    });
    expect(pending.status).toBe('pending');
    await h.stopService();
    await h.start(FAST);
    const done = await eventually(async () => {
      const l = await h.deliveries(org, sub.id);
      return l[0]?.status === 'delivered' ? l[0] : undefined;
    });
    expect(done).toMatchObject({ id: pending.id, attempts: 2 });
    expect(r.requests.map((x) => x.body.id)).toEqual([pending.id, pending.id]);
  });

  test('a subscription failing long enough is disabled with a reason', async () => {
    await h.stopService();
    await h.start({ ...FAST, maxAttempts: 1, disableAfterMs: 0, disableMinFailures: 2 });
    try {
      const org = newId();
      const r = await receiver(() => 500);
      const sub = await h.subscribe(org, r.url, ['*']);
      await h.publish(org, 'sample.created', { id: newId() });
      await h.publish(org, 'sample.created', { id: newId() });
      await eventually(async () => {
        const l = await h.deliveries(org, sub.id);
        return l.length === 2 && l.every((d) => d.status === 'failed') ? l : undefined;
      });
      // disabled: a new event creates no delivery
      await h.publish(org, 'sample.created', { id: newId() });
      const probe = await receiver();
      const other = await h.subscribe(org, probe.url, ['*']);
      await h.publish(org, 'sample.created', { id: 'after' });
      await eventually(() => probe.requests.find((x) => x.body.data.id === 'after'));
      expect(await h.deliveries(org, sub.id)).toHaveLength(2);
      expect(other.active).toBe(true);
    } finally {
      await h.stopService();
      await h.start(FAST);
    }
  });
});

describe('SSRF guard on deliveries (private networks not allowed)', () => {
  let strict: Harness;
  beforeAll(async () => {
    strict = await new Harness().open({ ...FAST, allowPrivateNetworks: false });
  });
  afterAll(async () => {
    await strict?.close();
  });

  test('a loopback receiver is refused at registration', async () => {
    const r = await receiver();
    await expect(strict.subscribe(newId(), r.url, ['sample.created'])).rejects.toMatchObject({ kind: 'invalid' });
  });

  // A subscription registered while private networks were allowed (or a name that
  // resolves elsewhere by the time of delivery): the delivery's own check holds.
  test('a receiver on loopback is never contacted; the delivery fails at once with the reason', async () => {
    const org = newId();
    const r = await receiver();
    await strict.stopService();
    await strict.start({ ...FAST, allowPrivateNetworks: true });
    const sub = await strict.subscribe(org, r.url, ['sample.created']);
    await strict.stopService();
    await strict.start({ ...FAST, allowPrivateNetworks: false });
    await strict.publish(org, 'sample.created', { id: newId() });
    const [d] = await eventually(async () => {
      const l = await strict.deliveries(org, sub.id);
      return l[0]?.status === 'failed' ? l : undefined;
    });
    expect(d).toMatchObject({ attempts: 1, last_error: expect.stringMatching(/^blocked_address/) });
    expect(d!.last_status_code).toBeUndefined();
    expect(r.requests).toHaveLength(0);
  });
});

describe('subscription management', () => {
  test('validation: url scheme and length, event names, secret', async () => {
    const org = newId();
    const bad = async (req: Partial<webhooks.CreateSubscriptionRequest>) =>
      h.client!.call('createSubscription', { org_id: org, url: 'https://example.com/x', events: ['*'], ...req }, h.operator(org)).then(
        () => 'created',
        (e: Error & { kind?: string }) => e.kind,
      );
    expect(await bad({ url: 'ftp://example.com/x' })).toBe('invalid');
    expect(await bad({ url: `https://example.com/${'a'.repeat(2000)}` })).toBe('invalid');
    expect(await bad({ url: 'https://user:pw@example.com/' })).toBe('invalid');
    expect(await bad({ events: ['audit.record'] })).toBe('invalid');
    expect(await bad({ events: [] })).toBe('invalid');
    expect(await bad({ secret: 'short' })).toBe('invalid');
    const generated = await h.subscribe(org, 'https://example.com/hook', ['experiment.*', 'sample.created']);
    expect(generated.secret).toMatch(/^whsec_[A-Za-z0-9_-]{43}$/);
  });

  test('deliveries of a subscription in another organisation are not found', async () => {
    const org = newId();
    const sub = await h.subscribe(org, 'https://example.com/hook');
    await expect(h.deliveries(newId(), sub.id)).rejects.toMatchObject({ kind: 'not_found' });
    await expect(h.deliveries(org, 'nope')).rejects.toMatchObject({ kind: 'not_found' });
  });

  test('creates at the limit take turns: an organisation never holds more than the limit', async () => {
    const org = newId();
    for (let i = 0; i < MAX_SUBSCRIPTIONS_PER_ORG - 3; i++) await h.subscribe(org, `https://example.com/hook/${i}`);
    const outcomes = await Promise.allSettled(Array.from({ length: 8 }, (_, i) => h.subscribe(org, `https://example.com/late/${i}`)));
    expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(3);
    for (const o of outcomes) if (o.status === 'rejected') expect(o.reason).toMatchObject({ kind: 'conflict', code: 'too_many_subscriptions' });
  });

  test('management calls need the operator', async () => {
    const org = newId();
    await expect(
      h.client!.call('createSubscription', { org_id: org, url: 'https://example.com/', events: ['*'] }, systemContext(newId(), org)),
    ).rejects.toMatchObject({ kind: 'forbidden' });
  });
});

describe('retention', () => {
  test('settled deliveries and inbound events past the retention go; pending ones and recent ones stay', async () => {
    const org = newId();
    const sub = await h.subscribe(org, 'https://example.com/hook');
    const db = h.svc!.deps.db;
    const ids: Record<string, string> = {};
    const delivery = async (name: string, status: string, ageDays: number) => {
      ids[name] = newId();
      await db.orm.execute(sql`insert into webhooks.deliveries (id, org_id, subscription_id, event_id, event, data, host, status, created_at)
        values (${ids[name]}::uuid, ${org}::uuid, ${sub.id}::uuid, ${newId()}::uuid, 'sample.created', '{}'::jsonb, 'example.com', ${status},
                now() - (${ageDays} * interval '1 day'))`);
    };
    await delivery('oldDelivered', 'delivered', 31);
    await delivery('oldFailed', 'failed', 31);
    await delivery('oldPending', 'pending', 31);
    await delivery('recentDelivered', 'delivered', 29);

    const endpoint = newId();
    await db.orm.execute(sql`insert into webhooks.inbound_endpoints (id, org_id, slug, slug_generated, secret)
      values (${endpoint}::uuid, ${org}::uuid, ${`retention-${endpoint}`}, false, 'secret')`);
    const event = async (name: string, jobStatus: string | null, ageDays: number) => {
      ids[name] = newId();
      await db.orm.execute(sql`insert into webhooks.inbound_events (id, org_id, endpoint_id, event_type, job_type, job_status, received_at)
        values (${ids[name]}::uuid, ${org}::uuid, ${endpoint}::uuid, 'order.updated', ${jobStatus ? 'audit_export' : null}, ${jobStatus},
                now() - (${ageDays} * interval '1 day'))`);
    };
    await event('oldEvent', null, 31);
    await event('oldJobCreated', 'created', 31);
    await event('oldJobPending', 'pending', 31);
    await event('recentEvent', null, 29);

    // the service's own housekeeping may have run first: what is left is what counts
    await purgeSettledDeliveries(db, 30);
    await purgeInboundEvents(db, 30);
    const left = await db.rows<{ id: string }>(sql`select id::text from webhooks.deliveries where subscription_id = ${sub.id}::uuid
      union all select id::text from webhooks.inbound_events where endpoint_id = ${endpoint}::uuid`);
    expect(left.map((r) => r.id).sort()).toEqual([ids.oldPending, ids.recentDelivered, ids.oldJobPending, ids.recentEvent].sort());
  });
});
