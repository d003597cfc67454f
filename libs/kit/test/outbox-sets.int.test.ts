import { connect } from 'amqplib';
import { sql } from 'drizzle-orm';
import {
  AmqpBus,
  Emitter,
  createLogger,
  messagesIn,
  migrate,
  newId,
  openDatabase,
  Outbox,
  systemContext,
  type Bus,
  type BusMessage,
  type Database,
  type SerializedMessage,
} from '@lab/kit';
import { dropFreshDatabases, freshDatabaseUrl, uniqueExchange } from '../../../testing/src/backing';
import { describeWithServers } from '../../../testing/src/servers';
import { waitFor } from '../../../testing/src/waits';

// Many events of one write (Emitter.eventsJson): stored as outbox rows of several
// messages, published message by message.
const log = createLogger('test', 'silent');
let db: Database;
/** The outbox the tests write with; its relay stopped, so the tests' relays drive every pass. */
let outbox: Outbox;

beforeAll(async () => {
  db = await openDatabase({ url: await freshDatabaseUrl(), dataDir: `/tmp/lab-kit-${newId()}` });
  await migrate(db, 'kit_sets', `${__dirname}/fixtures/sets-migrations`);
  outbox = relayVia({ publish: async () => undefined });
  await outbox.stop(Date.now());
});

afterAll(async () => {
  await db.close();
  await dropFreshDatabases();
});

/** A relay on the test's outbox over a bus made of `bus` (never delivering in process). */
function relayVia(bus: Partial<Bus>, opts: { batchSize?: number } = {}): Outbox {
  const full: Bus = {
    publish: async () => undefined,
    subscribe: async () => undefined,
    connected: true,
    deliversInProcess: false,
    close: async () => undefined,
    ...bus,
  };
  return new Outbox({ service: 'kit-sets', schema: 'kit_sets', db, bus: full, log, ...opts });
}

/** n thing.counted events of one write, their data {name, n}; the names. */
async function writeEvents(n: number, requestId = 'req-sets'): Promise<string[]> {
  const names = Array.from({ length: n }, (_, i) => `t"${i}`);
  await outbox.write(systemContext(requestId), async (_tx, emit) => {
    emit.eventsJson(
      'thing.counted',
      null,
      names.map((name, i) => JSON.stringify({ name, n: i + 1 })),
    );
  });
  return names;
}

const outboxRows = async () =>
  db.rows<{ messages: number | null; due_to_old: boolean }>(sql`select messages, next_attempt_at <= now() as due_to_old from kit_sets.outbox order by seq`);
async function drain(relay: Outbox): Promise<number> {
  let removed = 0;
  for (let got = -1; got !== 0;) removed += got = await relay.drainOnce();
  return removed;
}

afterEach(() => db.orm.execute(sql`delete from kit_sets.outbox`));

test('one message per element, each as event() makes it, in rows of up to 500 that older relays do not take', async () => {
  const names = await writeEvents(1203);
  // three rows (500, 500, 203), none due to a relay that reads next_attempt_at <= now() only
  expect(await outboxRows()).toEqual([
    { messages: 500, due_to_old: false },
    { messages: 500, due_to_old: false },
    { messages: 203, due_to_old: false },
  ]);
  const published: BusMessage[] = [];
  expect(await drain(relayVia({ publish: async (m) => void published.push(...m) }))).toBe(1203);
  expect(published.map((m) => (m.data as { name: string }).name)).toEqual(names);
  expect(new Set(published.map((m) => m.id)).size).toBe(1203);
  const ref = new Emitter('kit-sets', systemContext('req-sets'));
  ref.event('thing.counted', null, { name: names[0], n: 1 });
  expect(published[0]).toEqual({ ...ref.messages[0], id: published[0]!.id, occurred_at: published[0]!.occurred_at });
  for (const m of published) {
    expect(Object.keys(m)).toEqual(Object.keys(ref.messages[0]!));
    expect(m.id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(new Date(m.occurred_at).toISOString()).toBe(m.occurred_at);
  }
  expect(await outboxRows()).toEqual([]);
});

test('a pass takes up to its batch of messages, and at least one row', async () => {
  await writeEvents(300);
  await writeEvents(300);
  const sizes: number[] = [];
  const relay = relayVia({ publish: async (m) => void sizes.push(m.length) }, { batchSize: 500 });
  expect(await relay.drainOnce()).toBe(300);
  expect(await relay.drainOnce()).toBe(300);
  expect(await relay.drainOnce()).toBe(0);
  // a row of more messages than the batch still goes, alone
  await writeEvents(40);
  const small = relayVia({ publish: async (m) => void sizes.push(m.length) }, { batchSize: 10 });
  expect(await small.drainOnce()).toBe(40);
  expect(sizes).toEqual([300, 300, 40]);
});

test('messages of a row refused one by one become rows of their own; none is lost or sent twice once taken', async () => {
  await writeEvents(50);
  const taken = new Map<string, number>();
  let refuse = true;
  const relay = relayVia({
    publish: async (m) => {
      // the first pass: every 7th refused; then every one taken
      const refused = refuse ? m.filter((_, i) => i % 7 === 0).map((x) => ({ id: x.id, error: 'no' })) : [];
      const no = new Set(refused.map((r) => r.id));
      for (const x of m) if (!no.has(x.id)) taken.set(x.id, (taken.get(x.id) ?? 0) + 1);
      return { refused };
    },
  });
  expect(await relay.drainOnce()).toBe(42);
  // the row of 50 is gone; the 8 refused wait as rows of their own, with a backoff
  const left = await db.rows<{ messages: number | null; attempts: number; later: boolean }>(
    sql`select messages, attempts, next_attempt_at > now() as later from kit_sets.outbox`,
  );
  expect(left).toHaveLength(8);
  expect(left.every((r) => r.messages === null && r.attempts === 1 && r.later)).toBe(true);
  refuse = false;
  await db.orm.execute(sql`update kit_sets.outbox set next_attempt_at = now()`);
  expect(await drain(relay)).toBe(8);
  expect(taken.size).toBe(50);
  expect([...taken.values()].every((v) => v === 1)).toBe(true);
});

test('a row a broker refuses whole becomes a row per message, with a backoff, each published once after', async () => {
  await writeEvents(30);
  const sent: SerializedMessage[] = [];
  let refuse = true;
  const relay = relayVia({
    publish: async () => {
      throw new Error('a broker takes the JSON as it is');
    },
    publishSerialized: async (m) => {
      sent.push(...m);
      return { refused: refuse ? m.map((x) => ({ id: x.id, error: 'nack' })) : [] };
    },
  });
  expect(await relay.drainOnce()).toBe(0);
  expect(sent).toEqual([expect.objectContaining({ type: 'thing.counted', count: 30 })]);
  const left = await db.rows<{ messages: number | null; attempts: number; later: boolean }>(
    sql`select messages, attempts, next_attempt_at > now() as later from kit_sets.outbox`,
  );
  expect(left).toHaveLength(30);
  expect(left.every((r) => r.messages === null && r.attempts === 1 && r.later)).toBe(true);
  refuse = false;
  sent.length = 0;
  await db.orm.execute(sql`update kit_sets.outbox set next_attempt_at = now()`);
  expect(await drain(relay)).toBe(30);
  expect(new Set(sent.map((m) => m.id)).size).toBe(30);
  expect(sent.every((m) => m.count === undefined)).toBe(true);
});

test('a bus away leaves the row whole, still hidden from older relays', async () => {
  await writeEvents(20);
  const down = relayVia({
    publish: async () => {
      throw new Error('bus away');
    },
  });
  expect(await down.drainOnce()).toBe(0);
  expect(await outboxRows()).toEqual([{ messages: 20, due_to_old: false }]);
  expect(await down.backlog()).toBe(20);
});

test('a write that emits no element stores no outbox row', async () => {
  await writeEvents(0);
  expect(await outboxRows()).toEqual([]);
});

describeWithServers(['rabbitmq'], 'to RabbitMQ', () => {
  const url = process.env.AMQP_URL!;
  /** What a queue bound to thing.counted on a fresh exchange receives through a relay on a bus bundling `bundled`. */
  async function receivedVia(bundled: string[], n: number): Promise<{ messages: BusMessage[]; amqp: number }> {
    const exchange = uniqueExchange();
    const bus = await AmqpBus.connect(url, exchange, log, { queueExpiresMs: 600_000, bundledTypes: bundled });
    const conn = await connect(url);
    try {
      const ch = await conn.createChannel();
      await ch.assertExchange(exchange, 'topic', { durable: true });
      const q = await ch.assertQueue('', { exclusive: true });
      await ch.bindQueue(q.queue, exchange, 'thing.counted');
      const messages: BusMessage[] = [];
      let amqp = 0;
      await ch.consume(
        q.queue,
        (m) => {
          if (!m) return;
          amqp++;
          messages.push(...messagesIn(m));
        },
        { noAck: true },
      );
      await writeEvents(n);
      expect(await drain(new Outbox({ service: 'kit-sets', schema: 'kit_sets', db, bus, log }))).toBe(n);
      await waitFor(`${n} messages`, () => messages.length >= n);
      return { messages, amqp };
    } finally {
      await conn.close();
      await bus.close();
    }
  }

  test('a bus that bundles the type sends the row as one bundle; one that does not, message by message', async () => {
    const bundled = await receivedVia(['thing.counted'], 120);
    expect(bundled.amqp).toBe(1);
    const single = await receivedVia([], 120);
    expect(single.amqp).toBe(120);
    for (const { messages } of [bundled, single]) {
      expect(messages.map((m) => (m.data as { n: number }).n)).toEqual(Array.from({ length: 120 }, (_, i) => i + 1));
      expect(new Set(messages.map((m) => m.id)).size).toBe(120);
      expect(messages.every((m) => m.type === 'thing.counted' && m.request_id === 'req-sets')).toBe(true);
    }
  });
});
