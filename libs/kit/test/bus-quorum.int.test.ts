import { connect, type Channel, type ChannelModel } from 'amqplib';
import { execFile } from 'node:child_process';
import pino from 'pino';
import { AmqpBus, durableQueueArguments, newId, QUORUM_DELIVERY_LIMIT, type BusMessage, type BusQueueType, type Logger } from '@lab/kit';
import { uniqueExchange } from '../../../testing/src/backing';
import { waitFor } from '../../../testing/src/waits';
import { describeWithServers } from '../../../testing/src/servers';

/**
 * The durable queues on a RabbitMQ cluster: quorum queues by default (replicated,
 * so a broker node lost takes none of them), classic when LAB_BUS_QUEUE_TYPE says
 * so, the retry and dead-letter scheme working on both, and a deployment whose
 * queues already exist as the other type running on them instead of failing.
 */
const amqpUrl = process.env.AMQP_URL;
const describeBroker = (title: string, body: () => void) => describeWithServers(['rabbitmq'], title, body);

const message = (): BusMessage => ({ id: newId(), type: 'thing.done', org_id: null, occurred_at: new Date().toISOString(), data: {} });
const until = (cond: () => boolean | Promise<boolean>, what: string, ms = 15_000) => waitFor(what, cond, ms);

/** A logger whose lines the test reads (warn and above). */
function capturingLogger(): { log: Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const log = pino({ level: 'warn' }, { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) });
  return { log, lines };
}

/** Subscribes to the route, publishes one message and sees it delivered, once. */
async function deliversOne(bus: AmqpBus, route: { queue: string; bindings: string[] }): Promise<void> {
  const seen: string[] = [];
  await bus.subscribe({ ...route, handler: async (m) => void seen.push(m.id) });
  const msg = message();
  await bus.publish([msg]);
  await until(() => seen.length > 0, 'the delivery');
  expect(seen).toEqual([msg.id]);
}

describeBroker('durable queues on RabbitMQ: quorum by default, classic by setting', () => {
  let admin: ChannelModel;
  const cleanup: string[] = [];

  beforeAll(async () => {
    admin = await connect(amqpUrl!);
  });

  afterAll(async () => {
    const ch = await admin.createChannel();
    for (const q of cleanup) await ch.deleteQueue(q).catch(() => undefined);
    await admin.close();
  });

  /** A channel of the test's own that a refused declaration may close. */
  async function channel(): Promise<Channel> {
    const ch = await admin.createChannel();
    ch.on('error', () => undefined);
    return ch;
  }

  /**
   * The type of an existing queue without the management API: RabbitMQ accepts
   * a second declaration only when its arguments (the type among them) are those
   * of the queue, and a declaration of an existing queue changes nothing.
   */
  async function typeOf(queue: string, role: 'main' | 'retry' | 'dlq', expiresMs?: number): Promise<BusQueueType | 'neither'> {
    const name = role === 'main' ? queue : `${queue}.${role}`;
    for (const type of ['quorum', 'classic'] as const) {
      const ch = await channel();
      try {
        await ch.assertQueue(name, { durable: true, arguments: durableQueueArguments(type, queue, role, expiresMs) });
        await ch.close();
        return type;
      } catch {
        // refused: not this type (the channel is closed)
      }
    }
    return 'neither';
  }

  /** The three queues of a route, as rabbitmqctl lists them (when it is there: one call, it is slow). */
  function listedTypes(queue: string): Promise<Record<string, string> | undefined> {
    return new Promise((resolve) => {
      execFile('rabbitmqctl', ['list_queues', '-q', '--no-table-headers', 'name', 'type'], { timeout: 20_000 }, (err, stdout) => {
        if (err) {
          resolve(undefined);
          return;
        }
        const out: Record<string, string> = {};
        for (const line of stdout.split('\n')) {
          const [name, type] = line.trim().split(/\s+/);
          if (name?.startsWith(queue)) out[name] = type!;
        }
        resolve(out);
      });
    });
  }

  function track(queue: string): string {
    cleanup.push(queue, `${queue}.retry`, `${queue}.dlq`);
    return queue;
  }

  it('declares the queue, its .retry and its .dlq as quorum queues by default', async () => {
    const exchange = uniqueExchange();
    const route = { queue: `qtype-${newId()}`, bindings: ['thing.#'] };
    const queue = track(`${exchange}.${route.queue}`);
    const bus = await AmqpBus.connect(amqpUrl!, exchange, pino({ level: 'silent' }), { declare: [route], queueExpiresMs: 60_000 });
    try {
      expect([await typeOf(queue, 'main', 60_000), await typeOf(queue, 'retry'), await typeOf(queue, 'dlq')]).toEqual(['quorum', 'quorum', 'quorum']);
      const listed = await listedTypes(queue);
      if (listed) expect(listed).toEqual({ [queue]: 'quorum', [`${queue}.retry`]: 'quorum', [`${queue}.dlq`]: 'quorum' });
    } finally {
      await bus.close();
    }
  });

  it('keeps private transient queues classic (a quorum queue cannot be exclusive), and they work', async () => {
    const bus = await AmqpBus.connect(amqpUrl!, uniqueExchange(), pino({ level: 'silent' }));
    try {
      const seen: string[] = [];
      await bus.subscribe({ queue: 'private', transient: true, bindings: ['thing.#'], handler: async (m) => void seen.push(m.id) });
      const msg = message();
      await bus.publish([msg]);
      await until(() => seen.length > 0, 'the delivery');
      expect(seen).toEqual([msg.id]);
    } finally {
      await bus.close();
    }
  });

  it.each(['quorum', 'classic'] as const)(
    'on %s queues, a failing message goes through .retry back to the queue, and after its last attempt to .dlq',
    async (queueType) => {
      const exchange = uniqueExchange();
      const name = `retry-${queueType}-${newId()}`;
      const queue = track(`${exchange}.${name}`);
      const bus = await AmqpBus.connect(amqpUrl!, exchange, pino({ level: 'silent' }), { queueType, queueExpiresMs: 60_000 });
      try {
        const calls: { id: string; at: number }[] = [];
        await bus.subscribe({
          queue: name,
          bindings: ['thing.#'],
          maxAttempts: 3,
          handler: async (m) => {
            calls.push({ id: m.id, at: Date.now() });
            throw new Error('this message cannot be handled');
          },
        });
        expect(await typeOf(queue, 'main', 60_000)).toBe(queueType);
        const msg = message();
        await bus.publish([msg]);
        const ch = await channel();
        await until(async () => (await ch.checkQueue(`${queue}.dlq`)).messageCount === 1, 'the message in .dlq');
        // three attempts, each after the retry queue's delay (at least half of 500 ms, then of 1 s)
        expect(calls.map((c) => c.id)).toEqual([msg.id, msg.id, msg.id]);
        expect(calls[1]!.at - calls[0]!.at).toBeGreaterThanOrEqual(200);
        expect(calls[2]!.at - calls[1]!.at).toBeGreaterThanOrEqual(450);
        const parked = await ch.get(`${queue}.dlq`, { noAck: true });
        expect(parked && JSON.parse(parked.content.toString())).toMatchObject({ id: msg.id });
        expect(parked && parked.properties.headers?.['x-lab-attempt']).toBe(3);
        expect((await ch.checkQueue(queue)).messageCount).toBe(0);
        expect((await ch.checkQueue(`${queue}.retry`)).messageCount).toBe(0);
        await ch.close();
      } finally {
        await bus.close();
      }
    },
  );

  it(`parks a message returned unacked more than ${QUORUM_DELIVERY_LIMIT} times in .dlq instead of dropping it; moved back, it is handled even through .retry`, async () => {
    const exchange = uniqueExchange();
    const route = { queue: `limit-${newId()}`, bindings: ['thing.#'] };
    const queue = track(`${exchange}.${route.queue}`);
    const bus = await AmqpBus.connect(amqpUrl!, exchange, pino({ level: 'silent' }), { declare: [route], queueExpiresMs: 60_000 });
    try {
      const msg = message();
      await bus.publish([msg]);
      // a consumer that dies with the message every time (a crash, a lost connection)
      const ch = await admin.createConfirmChannel();
      let deliveries = 0;
      await until(async () => {
        if ((await ch.checkQueue(`${queue}.dlq`)).messageCount === 1) return true;
        const consumer = await channel();
        const got = await consumer.get(queue, { noAck: false });
        await consumer.close(); // returned unacked
        if (got) deliveries++;
        if (deliveries > QUORUM_DELIVERY_LIMIT + 5) throw new Error('the delivery limit did not apply');
        return false;
      }, 'the message in .dlq');
      expect(deliveries).toBe(QUORUM_DELIVERY_LIMIT + 1);
      // an operator moves it back as a shovel would, headers (x-death naming the queue) and all
      const parked = await ch.get(`${queue}.dlq`, { noAck: true });
      expect(parked.properties.headers?.['x-first-death-reason']).toBe('delivery_limit');
      ch.sendToQueue(queue, parked.content, { ...parked.properties, persistent: true });
      await ch.waitForConfirms();
      await ch.close();
      // it fails once more and goes through .retry: RabbitMQ (3.x) would drop a message
      // dead-lettered back into a queue its x-death names, were those headers kept
      const seen: string[] = [];
      await bus.subscribe({
        ...route,
        handler: async (m) => {
          seen.push(m.id);
          if (seen.length === 1) throw new Error('fails once');
        },
      });
      await until(() => seen.length === 2, 'the message handled after its retry');
      expect(seen).toEqual([msg.id, msg.id]);
    } finally {
      await bus.close();
    }
  });

  describe('queues that already exist as the other type', () => {
    /** The queues as the bus declared them before their type was configurable: classic, no type argument. */
    async function declareAsBefore(queue: string, expiresMs: number): Promise<void> {
      const ch = await admin.createChannel();
      await ch.assertQueue(queue, { durable: true, arguments: { 'x-expires': expiresMs } });
      await ch.assertQueue(`${queue}.retry`, { durable: true, arguments: { 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': queue } });
      await ch.assertQueue(`${queue}.dlq`, { durable: true });
      await ch.close();
    }

    it('runs on existing classic queues with the quorum default: one warning per queue naming it, its type and the setting', async () => {
      const exchange = uniqueExchange();
      const route = { queue: `upgrade-${newId()}`, bindings: ['thing.#'] };
      const queue = track(`${exchange}.${route.queue}`);
      await declareAsBefore(queue, 60_000);
      const { log, lines } = capturingLogger();
      const bus = await AmqpBus.connect(amqpUrl!, exchange, log, { declare: [route], queueExpiresMs: 60_000 });
      try {
        expect(bus.connected).toBe(true);
        // subscribing declares the queues again: no second warning
        await deliversOne(bus, route);

        const warnings = lines.filter((l) => l.level === 40);
        expect(warnings.map((w) => [w.queue, w.existing, w.setting])).toEqual([
          [queue, 'classic', 'LAB_BUS_QUEUE_TYPE=quorum'],
          [`${queue}.retry`, 'classic', 'LAB_BUS_QUEUE_TYPE=quorum'],
          [`${queue}.dlq`, 'classic', 'LAB_BUS_QUEUE_TYPE=quorum'],
        ]);
        expect(String(warnings[0]!.msg)).toContain(`queue ${queue} exists as a classic queue`);
        expect(String(warnings[0]!.refused)).toMatch(/^PRECONDITION_FAILED - inequivalent arg/);
        expect(lines.filter((l) => (l.level as number) > 40)).toEqual([]);
        // left as they were
        expect([await typeOf(queue, 'main', 60_000), await typeOf(queue, 'retry'), await typeOf(queue, 'dlq')]).toEqual(['classic', 'classic', 'classic']);
      } finally {
        await bus.close();
      }
    });

    it('a failing message still goes through the existing classic .retry and .dlq', async () => {
      const exchange = uniqueExchange();
      const name = `upgrade-retry-${newId()}`;
      const queue = track(`${exchange}.${name}`);
      await declareAsBefore(queue, 60_000);
      const bus = await AmqpBus.connect(amqpUrl!, exchange, pino({ level: 'silent' }), { queueExpiresMs: 60_000 });
      try {
        let calls = 0;
        await bus.subscribe({
          queue: name,
          bindings: ['thing.#'],
          maxAttempts: 2,
          handler: async () => {
            calls++;
            throw new Error('this message cannot be handled');
          },
        });
        await bus.publish([message()]);
        const ch = await channel();
        await until(async () => (await ch.checkQueue(`${queue}.dlq`)).messageCount === 1, 'the message in .dlq');
        expect(calls).toBe(2);
        await ch.close();
      } finally {
        await bus.close();
      }
    });

    it('runs on existing quorum queues with LAB_BUS_QUEUE_TYPE=classic, and on a queue whose other arguments differ', async () => {
      const exchange = uniqueExchange();
      const route = { queue: `downgrade-${newId()}`, bindings: ['thing.#'] };
      const queue = track(`${exchange}.${route.queue}`);
      // declared quorum by one process, with another queue expiry than the next one's
      const first = await AmqpBus.connect(amqpUrl!, exchange, pino({ level: 'silent' }), { declare: [route], queueExpiresMs: 60_000 });
      await first.close();
      const { log, lines } = capturingLogger();
      const bus = await AmqpBus.connect(amqpUrl!, exchange, log, { declare: [route], queueType: 'classic', queueExpiresMs: 120_000 });
      try {
        await deliversOne(bus, route);
        expect(lines.map((w) => [w.queue, w.existing, w.setting])).toEqual([
          // the expiry differs too: not what a classic declaration would be either
          [queue, 'other arguments', 'LAB_BUS_QUEUE_TYPE=classic'],
          [`${queue}.retry`, 'quorum', 'LAB_BUS_QUEUE_TYPE=classic'],
          [`${queue}.dlq`, 'quorum', 'LAB_BUS_QUEUE_TYPE=classic'],
        ]);
        expect(String(lines[0]!.refused)).toMatch(/^PRECONDITION_FAILED - inequivalent arg/);
        expect(await typeOf(queue, 'main', 60_000)).toBe('quorum');
      } finally {
        await bus.close();
      }
    });
  });
});
