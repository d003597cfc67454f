import { AmqpBus, createLogger, DomainError, MemoryBus, heldUntilOpen, newId, type BusMessage } from '@lab/kit';
import { uniqueExchange } from '../../../testing/src/backing';
import { waitFor } from '../../../testing/src/waits';
import { describeWithServers } from '../../../testing/src/servers';

/**
 * The connection to RabbitMQ drops while a consumer's handler is still running:
 * settling the message on the dead channel must not end the process, and the
 * broker delivers the message again once the bus has reconnected.
 */
const amqpUrl = process.env.AMQP_URL;
const describeBroker = (title: string, body: () => void) => describeWithServers(['rabbitmq'], title, body);

describeBroker('a connection dropped while a handler runs', () => {
  const log = createLogger('test', 'silent');
  const unhandled: unknown[] = [];
  const onUnhandled = (err: unknown) => void unhandled.push(err);
  let bus: AmqpBus;

  beforeAll(() => {
    process.on('unhandledRejection', onUnhandled);
    process.on('uncaughtException', onUnhandled);
  });

  afterAll(async () => {
    process.removeListener('unhandledRejection', onUnhandled);
    process.removeListener('uncaughtException', onUnhandled);
    await bus?.close();
  });

  /** Destroys the bus's socket to the broker, as a network failure would (the library keeps it private). */
  function dropConnection(b: AmqpBus): void {
    const model = (b as unknown as { model: { _core: { _model: { connection: { stream: { destroy(err?: Error): void } } } } } }).model;
    // with an error, as a reset would: a plain destroy() emits only 'close', which the library does not watch
    model._core._model.connection.stream.destroy(new Error('connection reset (test)'));
  }

  const until = (cond: () => boolean, what: string) => waitFor(what, cond);

  it.each([
    ['succeeded (ack)', false],
    ['failed (retry queue, then ack)', true],
  ])('a handler that %s on a dead channel: no crash, the message comes again', async (_name, fails) => {
    bus = await AmqpBus.connect(amqpUrl!, uniqueExchange(), log, { queueExpiresMs: 600_000 });
    const seen: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    await bus.subscribe({
      queue: `drop-${newId().slice(0, 8)}`,
      bindings: ['thing.#'],
      handler: async (m: BusMessage) => {
        seen.push(m.id);
        if (seen.length === 1) {
          await gate;
          if (fails) throw new Error('handler failed');
        }
      },
    });
    const msg: BusMessage = { id: newId(), type: 'thing.done', org_id: null, occurred_at: new Date().toISOString(), data: {} };
    await bus.publish([msg]);
    await until(() => seen.length === 1, 'the first delivery');

    dropConnection(bus);
    await until(() => !bus.connected, 'the bus to notice the drop');
    release(); // the handler settles its message on the closed channel
    await until(() => seen.length >= 2, 'the redelivery after reconnecting');

    expect(seen.every((id) => id === msg.id)).toBe(true);
    expect(bus.connected).toBe(true);
    // Nothing may surface unhandled after the settle on the dead channel. That
    // settle came before the redelivery; a marker published now and delivered (a
    // round trip to the broker, many turns of the event loop) comes after whatever
    // it set off, so once the marker is in, anything unhandled would be too.
    const marker: BusMessage = { ...msg, id: newId() };
    await bus.publish([marker]);
    await until(() => seen.includes(marker.id), 'the marker published after the redelivery');
    expect(unhandled).toEqual([]);
    await bus.close();
  });
});

// A database or peer away for a while is no fault of the message: its failures are
// retried for as long as they last and never park it, where eight failures of any
// other kind do.
describeBroker('transient failures of a consumer', () => {
  it('retries a message past its attempts while its failures are transient, then handles it', async () => {
    const bus = await AmqpBus.connect(amqpUrl!, uniqueExchange(), createLogger('test', 'silent'));
    try {
      let calls = 0;
      let handled = false;
      await bus.subscribe({
        queue: 'transient-test',
        bindings: ['thing.#'],
        maxAttempts: 1,
        handler: async () => {
          calls++;
          if (calls <= 3) throw new DomainError('unavailable', 'service_unavailable', 'the database is unavailable, try again');
          handled = true;
        },
      });
      await bus.publish([{ id: newId(), type: 'thing.done', org_id: null, occurred_at: new Date().toISOString(), data: {} }]);
      await waitFor('the message handled after three transient failures', () => handled, 20_000);
      expect(calls).toBe(4);
    } finally {
      await bus.close();
    }
  });
});

describe('the in-process bus', () => {
  const log = createLogger('test', 'silent');
  const message = (): BusMessage => ({ id: newId(), type: 'thing.done', org_id: null, occurred_at: new Date().toISOString(), data: {} });

  it('does not count transient failures toward parking a message: the relay retries it until it passes', async () => {
    const bus = new MemoryBus(log);
    let calls = 0;
    await bus.subscribe({
      queue: 'q',
      bindings: ['thing.#'],
      maxAttempts: 2,
      handler: async () => {
        calls++;
        if (calls <= 5) throw new DomainError('unavailable', 'service_unavailable', 'away for now');
      },
    });
    const msg = message();
    // as the outbox relay does: publish again while the message is refused
    for (let i = 0; i < 5; i++) expect(await bus.publish([msg])).toEqual({ refused: [expect.objectContaining({ id: msg.id, transient: true })] });
    expect(await bus.publish([msg])).toEqual({ refused: [] });
    expect(calls).toBe(6);
    await bus.close();
  });

  it('holds publishes until opened, so consumers that subscribe later get the backlog', async () => {
    const inner = new MemoryBus(log);
    const bus = heldUntilOpen(inner);
    const seen: string[] = [];
    const msg = message();
    const published = bus.publish([msg]);
    // a consumer that starts after the publisher (a service started later in the same process)
    await bus.subscribe({ queue: 'late', bindings: ['thing.#'], handler: async (m) => void seen.push(m.id) });
    // nothing is delivered before open(): a marker published past the hold, after
    // the held message, arrives alone (unheld, the message would have come first)
    const marker = message();
    await inner.publish([marker]);
    await waitFor('the marker published past the hold', () => seen.includes(marker.id));
    expect(seen).toEqual([marker.id]);
    bus.open();
    await published;
    expect(seen).toEqual([marker.id, msg.id]);
    await bus.close();
  });
});

// A producer that runs before its consumer's first start (a first deploy, a broker
// that lost its definitions): the queue it declares keeps the event for the consumer.
describeBroker('durable queues declared by every process', () => {
  it('keeps an event published before its consumer first subscribed', async () => {
    const exchange = uniqueExchange();
    const log = createLogger('test', 'silent');
    const route = { queue: `late-consumer-${newId()}`, bindings: ['thing.#'] };
    const producer = await AmqpBus.connect(amqpUrl!, exchange, log, { declare: [route], queueExpiresMs: 60_000 });
    const consumer = await AmqpBus.connect(amqpUrl!, exchange, log, { queueExpiresMs: 60_000 });
    try {
      const msg: BusMessage = { id: newId(), type: 'thing.done', org_id: null, occurred_at: new Date().toISOString(), data: {} };
      await producer.publish([msg]);
      const seen: string[] = [];
      await consumer.subscribe({ ...route, handler: async (m) => void seen.push(m.id) });
      await waitFor('the event kept for the late consumer', () => seen.length > 0, 5_000);
      expect(seen).toEqual([msg.id]);
    } finally {
      await producer.close();
      await consumer.close();
    }
  });
});

// The broker may close a channel and keep the connection (a message it refuses):
// the bus opens a new one instead of failing every publish until a restart.
describeBroker('a publish channel closed by itself', () => {
  it('is replaced, and publishing goes on', async () => {
    const bus = await AmqpBus.connect(amqpUrl!, uniqueExchange(), createLogger('test', 'silent'), { queueExpiresMs: 60_000 });
    try {
      const seen: string[] = [];
      await bus.subscribe({ queue: `reopen-${newId()}`, bindings: ['thing.#'], handler: async (m) => void seen.push(m.id) });
      // every publish channel of the bus closed, the connection left up
      type Channels = { channels: ({ close(): Promise<void> } | undefined)[] };
      const open = () => (bus as unknown as Channels).channels.filter(Boolean).length;
      const count = open();
      for (const channel of [...(bus as unknown as Channels).channels]) await channel!.close();
      expect(bus.connected).toBe(false);
      await waitFor(`${count} publish channel(s) open again`, () => open() >= count, 5_000);
      expect(open()).toBe(count);
      expect(bus.connected).toBe(true);
      const msg: BusMessage = { id: newId(), type: 'thing.done', org_id: null, occurred_at: new Date().toISOString(), data: {} };
      await bus.publish([msg]);
      await waitFor('the message published on the new channel delivered', () => seen.length > 0, 5_000);
      expect(seen).toEqual([msg.id]);
    } finally {
      await bus.close();
    }
  });
});

// The broker cancels a consumer whose queue is deleted (or moved): the bus consumes
// again, declaring the queue anew, instead of leaving it unread until a reconnect.
describeBroker('a consumer cancelled by the broker', () => {
  it('consumes again', async () => {
    const exchange = uniqueExchange();
    const bus = await AmqpBus.connect(amqpUrl!, exchange, createLogger('test', 'silent'), { queueExpiresMs: 60_000 });
    const { connect } = await import('amqplib');
    const admin = await connect(amqpUrl!);
    try {
      const seen: string[] = [];
      const queue = `cancelled-${newId()}`;
      await bus.subscribe({ queue, bindings: ['thing.#'], handler: async (m) => void seen.push(m.id) });
      const ch = await admin.createChannel();
      await ch.deleteQueue(`${exchange}.${queue}`);
      const msg: BusMessage = { id: newId(), type: 'thing.done', org_id: null, occurred_at: new Date().toISOString(), data: {} };
      // published until the queue is there again and the message is read
      await waitFor(
        'a message read from the queue declared anew',
        async () => {
          await bus.publish([msg]);
          return seen.length > 0;
        },
        { timeoutMs: 4_000, intervalMs: 100 },
      );
      expect(seen[0]).toBe(msg.id);
    } finally {
      await admin.close();
      await bus.close();
    }
  });
});

describeBroker('bundled message types', () => {
  const msgOf = (type: string, n: number): BusMessage => ({ id: newId(), type, org_id: null, occurred_at: new Date().toISOString(), data: { n } });

  it('sends the messages of a bundled type in one publish as one message, handed to the batch handler in order', async () => {
    const exchange = uniqueExchange();
    const bus = await AmqpBus.connect(amqpUrl!, exchange, createLogger('test', 'silent'), { queueExpiresMs: 60_000, bundledTypes: ['thing.audited'] });
    try {
      const batches: number[][] = [];
      const single: number[] = [];
      await bus.subscribe({
        queue: 'bundles',
        bindings: ['thing.#'],
        handler: async (m) => void single.push((m.data as { n: number }).n),
        handleBatch: async (msgs) => void batches.push(msgs.map((m) => (m.data as { n: number }).n)),
      });
      const outcome = await bus.publish([msgOf('thing.audited', 1), msgOf('thing.done', 2), msgOf('thing.audited', 3), msgOf('thing.audited', 4)]);
      expect(outcome.refused).toEqual([]);
      await waitFor('the bundle and the single message handled', () => batches.length === 1 && single.length === 1, 5_000);
      expect(batches).toEqual([[1, 3, 4]]);
      expect(single).toEqual([2]);
      // a lone message of a bundled type goes as a plain message
      await bus.publish([msgOf('thing.audited', 5)]);
      await waitFor('the lone message handled', () => single.length === 2, 5_000);
      expect(single).toEqual([2, 5]);
    } finally {
      await bus.close();
    }
  });

  it('bundles by binding pattern: one bundle per type the pattern matches, other types alone', async () => {
    const exchange = uniqueExchange();
    const bus = await AmqpBus.connect(amqpUrl!, exchange, createLogger('test', 'silent'), { queueExpiresMs: 60_000, bundledTypes: ['thing.#'] });
    try {
      const batches: { type: string; n: number[] }[] = [];
      const single: string[] = [];
      await bus.subscribe({
        queue: 'bundles',
        bindings: ['thing.#', 'thingy.#', 'other.#'],
        handler: async (m) => void single.push(`${m.type} ${(m.data as { n: number }).n}`),
        handleBatch: async (msgs) => void batches.push({ type: msgs[0]!.type, n: msgs.map((m) => (m.data as { n: number }).n) }),
      });
      const outcome = await bus.publish([
        msgOf('thing.created', 1),
        msgOf('thing.part.updated', 2),
        msgOf('other.created', 3),
        msgOf('thing.created', 4),
        msgOf('thing.part.updated', 5),
        msgOf('thingy.created', 6),
      ]);
      expect(outcome.refused).toEqual([]);
      await waitFor('both bundles and the two single messages handled', () => batches.length === 2 && single.length === 2, 5_000);
      expect(batches.sort((a, b) => a.n[0]! - b.n[0]!)).toEqual([
        { type: 'thing.created', n: [1, 4] },
        { type: 'thing.part.updated', n: [2, 5] },
      ]);
      // `thing.#` is a pattern of words: `thingy.created` is not of it
      expect(single.sort()).toEqual(['other.created 3', 'thingy.created 6']);
    } finally {
      await bus.close();
    }
  });

  it('closes a bundle at a megabyte of messages and begins the next', async () => {
    const exchange = uniqueExchange();
    const bus = await AmqpBus.connect(amqpUrl!, exchange, createLogger('test', 'silent'), { queueExpiresMs: 60_000, bundledTypes: ['thing.audited'] });
    try {
      const batches: number[][] = [];
      await bus.subscribe({
        queue: 'bundles',
        bindings: ['thing.#'],
        handler: async (m) => void batches.push([(m.data as { n: number }).n]),
        handleBatch: async (msgs) => void batches.push(msgs.map((m) => (m.data as { n: number }).n)),
      });
      const big = (n: number): BusMessage => ({ ...msgOf('thing.audited', n), data: { n, text: 'x'.repeat(400_000) } });
      await bus.publish([big(1), big(2), big(3)]);
      await waitFor('both parts handled', () => batches.flat().length === 3, 5_000);
      expect(batches).toEqual([[1, 2], [3]]);
    } finally {
      await bus.close();
    }
  });

  it('retries the messages of a failed bundle one by one, and sets aside only the one that keeps failing', async () => {
    const exchange = uniqueExchange();
    const bus = await AmqpBus.connect(amqpUrl!, exchange, createLogger('test', 'silent'), { queueExpiresMs: 60_000, bundledTypes: ['thing.audited'] });
    const { connect } = await import('amqplib');
    const admin = await connect(amqpUrl!);
    try {
      const handled: number[] = [];
      await bus.subscribe({
        queue: 'bundles',
        bindings: ['thing.#'],
        maxAttempts: 2,
        handler: async (m) => {
          const n = (m.data as { n: number }).n;
          if (n === 2) throw new Error('this one is broken');
          handled.push(n);
        },
        handleBatch: async (msgs) => {
          if (msgs.some((m) => (m.data as { n: number }).n === 2)) throw new Error('a broken message in the batch');
          handled.push(...msgs.map((m) => (m.data as { n: number }).n));
        },
      });
      await bus.publish([1, 2, 3].map((n) => msgOf('thing.audited', n)));
      await waitFor('the good messages handled alone', () => handled.length === 2, 10_000);
      expect(handled.sort()).toEqual([1, 3]);
      const ch = await admin.createChannel();
      const dlq = await waitFor(
        'the broken message parked',
        async () => {
          const q = await ch.checkQueue(`${exchange}.bundles.dlq`);
          return q.messageCount > 0 ? q : undefined;
        },
        10_000,
      );
      expect(dlq.messageCount).toBe(1);
      const parked = await ch.get(`${exchange}.bundles.dlq`, { noAck: true });
      expect(parked && (JSON.parse(parked.content.toString()) as BusMessage).data).toEqual({ n: 2 });
    } finally {
      await admin.close();
      await bus.close();
    }
  });
});
