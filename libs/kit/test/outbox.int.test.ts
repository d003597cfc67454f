import { join } from 'node:path';
import { connect, type ChannelModel } from 'amqplib';
import { sql } from 'drizzle-orm';
import {
  AmqpBus,
  Emitter,
  MAX_BROKER_REFUSALS,
  MemoryBus,
  createLogger,
  metrics,
  migrate,
  newId,
  openDatabase,
  Outbox,
  systemContext,
  type Bus,
  type BusMessage,
  type Database,
  type PublishOutcome,
} from '@lab/kit';
import { dropFreshDatabases, freshDatabaseUrl, uniqueExchange } from '../../../testing/src/backing';
import { waitFor } from '../../../testing/src/waits';
import { describeWithServers } from '../../../testing/src/servers';

const log = createLogger('test', 'silent');
const amqpUrl = process.env.AMQP_URL;
const exchange = uniqueExchange();
let db: Database;
let bus: Bus;
let outbox: Outbox;
let conn: ChannelModel | undefined;
const received: BusMessage[] = [];

beforeAll(async () => {
  db = await openDatabase({ url: await freshDatabaseUrl(), dataDir: `/tmp/lab-kit-${newId()}` });
  expect(await migrate(db, 'kit_test', join(__dirname, 'fixtures', 'migrations'))).toEqual(['001_things.sql']);
  // a second run applies nothing
  expect(await migrate(db, 'kit_test', join(__dirname, 'fixtures', 'migrations'))).toEqual([]);
  if (amqpUrl) {
    bus = await AmqpBus.connect(amqpUrl, exchange, log, { queueExpiresMs: 600_000 });
    // an independent consumer on the real broker, bound like any subscriber would be
    conn = await connect(amqpUrl);
    const ch = await conn.createChannel();
    await ch.assertExchange(exchange, 'topic', { durable: true });
    const q = await ch.assertQueue('', { exclusive: true });
    await ch.bindQueue(q.queue, exchange, 'thing.#');
    await ch.bindQueue(q.queue, exchange, 'audit.record');
    await ch.consume(q.queue, (m) => m && received.push(JSON.parse(m.content.toString())), { noAck: true });
  } else {
    bus = new MemoryBus(log);
    await bus.subscribe({ queue: 'kit-test', bindings: ['thing.#', 'audit.record'], handler: async (m) => void received.push(m) });
  }
  outbox = new Outbox({ service: 'kit-test', schema: 'kit_test', db, bus, log });
  outbox.start();
});

afterAll(async () => {
  await outbox.stop();
  await conn?.close();
  await bus.close();
  await db.close();
  await dropFreshDatabases();
});

const until = (cond: () => boolean | Promise<boolean>, what: string) => waitFor(what, cond);

test('every committed change publishes its event exactly once, and the outbox empties', async () => {
  const ids = await Promise.all(
    Array.from({ length: 60 }, async (_, i) => {
      const id = newId();
      await outbox.write(systemContext(`r${i}`), async (tx, emit) => {
        await tx.execute(sql`insert into kit_test.things (id, name) values (${id}::uuid, ${`t${i}`})`);
        emit.event('thing.created', null, { id });
      });
      return id;
    }),
  );
  await until(() => received.filter((m) => m.type === 'thing.created').length >= 60, '60 events');
  const got = received.filter((m) => m.type === 'thing.created').map((m) => (m.data as { id: string }).id);
  expect(new Set(got)).toEqual(new Set(ids));
  expect(got).toHaveLength(60);
  // the relay deletes a batch once the broker confirmed it, in the transaction that
  // locked it: a consumer may see the messages a moment before that commits
  const left = async () => (await db.rows<{ n: number }>(sql`select count(*)::int as n from kit_test.outbox`))[0]!.n;
  await until(async () => (await left()) === 0, 'the outbox to empty');
  expect(await left()).toBe(0);
  // the relay reports how long rows waited and how many it published
  const lag = (await metrics().outboxLag.get()).values.find((v) => v.metricName === 'lab_outbox_lag_seconds_count' && v.labels.service === 'kit-test');
  expect(lag?.value).toBeGreaterThanOrEqual(60);
});

test('a rolled back change publishes nothing', async () => {
  const before = received.length;
  await expect(
    outbox.write(systemContext('r'), async (tx, emit) => {
      emit.event('thing.created', null, { id: 'never' });
      await tx.execute(sql`insert into kit_test.things (id, name) values (${newId()}::uuid, null)`);
    }),
  ).rejects.toThrow();
  // a later event proves the relay ran past the point where the first would be
  await outbox.write(systemContext('r'), async (_tx, emit) => emit.event('thing.marker', null, {}));
  await until(() => received.some((m) => m.type === 'thing.marker'), 'marker');
  expect(received.slice(before).map((m) => m.type)).toEqual(['thing.marker']);
});

test('audit records carry actor, request id and changed fields', async () => {
  const ctx = { ...systemContext('req-audit'), user_id: newId(), token_id: newId(), token_kind: 'api_key' };
  await outbox.write(ctx, async (_tx, emit) =>
    emit.audit(null, { action: 'update', resource: 'things', record_id: 'x', before: { a: 1, b: 2 }, after: { a: 1, b: 3 } }),
  );
  await until(() => received.some((m) => m.type === 'audit.record' && m.request_id === 'req-audit'), 'audit record');
  const rec = received.find((m) => m.type === 'audit.record' && m.request_id === 'req-audit')!;
  expect(rec.data).toMatchObject({
    action: 'update',
    resource: 'things',
    record_id: 'x',
    actor_user_id: ctx.user_id,
    actor_token_id: ctx.token_id,
    token_kind: 'api_key',
    service: 'kit-test',
    changed_fields: ['b'],
    request_id: 'req-audit',
    before: { a: 1, b: 2 },
    after: { a: 1, b: 3 },
  });
});

/** A relay of its own on the same outbox table, publishing through `publish`. */
function relayVia(
  publish: (messages: BusMessage[]) => Promise<PublishOutcome | void>,
  opts: { publishTimeoutMs?: number; batchSize?: number; concurrency?: number } = {},
): Outbox {
  const via: Bus = {
    publish,
    subscribe: (o) => bus.subscribe(o),
    connected: true,
    deliversInProcess: bus.deliversInProcess,
    close: async () => undefined,
  };
  return new Outbox({ service: 'kit-test', schema: 'kit_test', db, bus: via, log, ...opts });
}

/** Commits events to the outbox without kicking any relay (the test drives the passes). */
async function enqueue(type: string, n: number): Promise<void> {
  const emit = new Emitter('kit-test', null);
  for (let i = 0; i < n; i++) emit.event(type, null, { n: i });
  await db.tx((tx) => outbox.insert(tx, emit.messages));
}

const describeBroker = (title: string, body: () => void) => describeWithServers(['rabbitmq'], title, body);
describeBroker('relay on a broker in another process (rows locked while they are published)', () => {
  test('a broker that does not confirm in time: the batch is kept untouched and published by the next pass', async () => {
    await outbox.stop(); // only the relays of this test drain
    try {
      let calls = 0;
      const hung = relayVia((m) => (++calls === 1 ? new Promise<void>(() => undefined) : bus.publish(m)), { publishTimeoutMs: 300 });
      await enqueue('thing.hung', 1);
      expect(await hung.drainOnce()).toBe(0); // timed out: nothing counted as published
      const [row] = await db.rows<{ attempts: number; later: boolean }>(
        sql`select attempts, next_attempt_at > now() as later from kit_test.outbox where type = 'thing.hung'`,
      );
      // kept as it was and due at once: a broker that does not confirm is the
      // broker's state, not the message's, so the row gets no backoff of its own
      expect(row).toEqual({ attempts: 0, later: false });
      expect(await hung.drainOnce()).toBe(1);
      await until(() => received.some((m) => m.type === 'thing.hung'), 'the kept message');
      expect((await db.rows<{ n: number }>(sql`select count(*)::int as n from kit_test.outbox`))[0]!.n).toBe(0);
    } finally {
      outbox.start();
    }
  });

  test('a message the broker keeps refusing is set aside, and the rest of its batch goes out', async () => {
    await outbox.stop();
    // a queue that takes nothing (length 0, reject-publish): the broker answers
    // every message routed to it with a negative confirm
    const ch = await conn!.createChannel();
    const full = await ch.assertQueue('', { exclusive: true, arguments: { 'x-max-length': 0, 'x-overflow': 'reject-publish' } });
    await ch.bindQueue(full.queue, exchange, 'thing.refused');
    try {
      const relay = relayVia((m) => bus.publish(m));
      await enqueue('thing.fine', 1);
      await enqueue('thing.refused', 1);
      await enqueue('thing.fine', 1);
      expect(await relay.drainOnce()).toBe(2);
      await until(() => received.filter((m) => m.type === 'thing.fine').length >= 2, 'the two taken');
      const kept = await db.rows<{ type: string; attempts: number }>(sql`select type, attempts from kit_test.outbox`);
      expect(kept).toEqual([{ type: 'thing.refused', attempts: 1 }]);
      for (let i = 1; i < MAX_BROKER_REFUSALS; i++) {
        await db.orm.execute(sql`update kit_test.outbox set next_attempt_at = now()`);
        await relay.drainOnce();
      }
      expect((await db.rows<{ n: number }>(sql`select count(*)::int as n from kit_test.outbox`))[0]!.n).toBe(0);
      const dead = await relay.deadLetters(10, 0);
      expect(dead.data.filter((d) => d.type === 'thing.refused')).toEqual([
        expect.objectContaining({ queue: null, attempts: MAX_BROKER_REFUSALS, message: expect.objectContaining({ type: 'thing.refused' }) }),
      ]);
    } finally {
      await ch.close();
      outbox.start();
    }
  });

  test('one relay with several batches in flight publishes every row exactly once', async () => {
    await outbox.stop();
    try {
      const seen = new Map<string, number>();
      const relay = relayVia(
        (m) => {
          for (const x of m) seen.set(x.id, (seen.get(x.id) ?? 0) + 1);
          return bus.publish(m);
        },
        { batchSize: 20, concurrency: 3 },
      );
      for (let i = 0; i < 10; i++) await enqueue('thing.inflight', 30);
      relay.start();
      const left = async () => (await db.rows<{ n: number }>(sql`select count(*)::int as n from kit_test.outbox`))[0]!.n;
      await until(async () => (await left()) === 0, 'the outbox to empty');
      await relay.stop(Date.now());
      expect(seen.size).toBe(300);
      expect([...seen.values()].every((v) => v === 1)).toBe(true);
    } finally {
      outbox.start();
    }
  });

  test('two relays draining one outbox at once publish every row exactly once', async () => {
    await outbox.stop();
    try {
      const seen = new Map<string, number>();
      const count = (m: BusMessage[]) => {
        for (const x of m) seen.set(x.id, (seen.get(x.id) ?? 0) + 1);
        return bus.publish(m);
      };
      // small batches, so the two take turns over the rows
      const [a, b] = [relayVia(count, { batchSize: 20 }), relayVia(count, { batchSize: 20 })];
      for (let i = 0; i < 10; i++) await enqueue('thing.shared', 30);
      const drain = async (r: Outbox) => {
        let n = 0;
        for (let got = -1; got !== 0;) n += got = await r.drainOnce();
        return n;
      };
      const [na, nb] = await Promise.all([drain(a), drain(b)]);
      expect(na + nb).toBe(300);
      expect(seen.size).toBe(300);
      expect([...seen.values()].every((v) => v === 1)).toBe(true);
      expect(na).toBeGreaterThan(0);
      expect(nb).toBeGreaterThan(0);
    } finally {
      outbox.start();
    }
  });
});
