import { join } from 'node:path';
import { connect, type ChannelModel } from 'amqplib';
import { sql } from 'drizzle-orm';
import { AmqpBus, createLogger, migrate, newId, openDatabase, Outbox, systemContext, type Database, type Logger } from '@lab/kit';
import { dropFreshDatabases, freshDatabaseUrl, uniqueExchange } from '../../../testing/src/backing';
import { cuttableProxy, type CuttableProxy } from '../../../testing/src/tcp-proxy';
import { waitFor } from '../../../testing/src/waits';
import { describeWithServers } from '../../../testing/src/servers';

/**
 * The relay through a broker outage, made by cutting a TCP proxy between the bus
 * and the shared broker (the broker itself stays up for everyone else): rows
 * written while the bus is away keep no retry delay of their own, the relay
 * drains them as soon as the bus reconnects (its poll is set far beyond the
 * test's waits, so only the reconnect can start that drain), and the outage is
 * logged as two state changes, not once per failed pass.
 */
const amqpUrl = process.env.AMQP_URL;
const describeBroker = (title: string, body: () => void) => describeWithServers(['rabbitmq'], title, body);

/** The broker behind a proxy the test can cut: the URL to reach it through the proxy. */
async function brokerProxy(target: URL): Promise<CuttableProxy & { url: string }> {
  const proxy = await cuttableProxy(target.hostname, Number(target.port || 5672));
  const url = new URL(target.toString());
  url.hostname = '127.0.0.1';
  url.port = String(proxy.port);
  return { ...proxy, url: url.toString() };
}

/** A logger that keeps the messages of its warn and info lines. */
function recordingLog(): { log: Logger; lines: { level: string; msg: string; obj: Record<string, unknown> }[] } {
  const lines: { level: string; msg: string; obj: Record<string, unknown> }[] = [];
  const base = createLogger('test', 'silent');
  const rec = (level: string) => (obj: unknown, msg?: string) =>
    void lines.push({ level, msg: typeof obj === 'string' ? obj : (msg ?? ''), obj: typeof obj === 'object' ? (obj as Record<string, unknown>) : {} });
  const log = Object.assign(Object.create(base), { warn: rec('warn'), info: rec('info'), error: rec('error') }) as Logger;
  return { log, lines };
}

const until = (cond: () => boolean | Promise<boolean>, what: string, ms = 30_000) => waitFor(what, cond, ms);

describeBroker('outbox relay through a broker outage', () => {
  const exchange = uniqueExchange();
  let db: Database;
  let conn: ChannelModel;
  const received = new Set<string>();

  beforeAll(async () => {
    db = await openDatabase({ url: await freshDatabaseUrl(), dataDir: `/tmp/lab-kit-${newId()}` });
    await migrate(db, 'kit_test', join(__dirname, 'fixtures', 'migrations'));
    // an independent consumer on the broker itself, not behind the proxy
    conn = await connect(amqpUrl!);
    const ch = await conn.createChannel();
    await ch.assertExchange(exchange, 'topic', { durable: true });
    const q = await ch.assertQueue('', { exclusive: true });
    await ch.bindQueue(q.queue, exchange, 'thing.#');
    await ch.consume(q.queue, (m) => m && received.add((JSON.parse(m.content.toString()) as { id: string }).id), { noAck: true });
  });

  afterAll(async () => {
    const ch = await conn.createChannel();
    await ch.deleteExchange(exchange).catch(() => undefined);
    await conn.close();
    await db.close();
    await dropFreshDatabases();
  });

  test('rows written in the outage wait for no timer of their own: the reconnect drains them, and the outage is two log lines', async () => {
    const proxy = await brokerProxy(new URL(amqpUrl!));
    const bus = await AmqpBus.connect(proxy.url, exchange, createLogger('test', 'silent'));
    const { log, lines } = recordingLog();
    // the poll would come only after the test: a drain in time is the reconnect's
    const outbox = new Outbox({ service: 'kit-rec', schema: 'kit_test', db, bus, log, pollMs: 600_000 });
    outbox.start();
    try {
      const ids: string[] = [];
      const write = async (n: number) => {
        for (let i = 0; i < n; i++) {
          await outbox.write(systemContext(`r${i}`), async (_tx, emit) => {
            emit.event('thing.created', null, { i });
            ids.push(emit.messages[0]!.id);
          });
        }
      };
      await write(5);
      await until(() => ids.every((id) => received.has(id)), 'the events before the outage');

      proxy.cut();
      await until(() => !bus.connected, 'the bus to notice the outage');
      // every write kicks a relay pass, and each one fails on the bus away
      await write(40);
      await until(() => lines.some((l) => l.msg.includes('message bus unavailable')), 'the outage logged');
      const during = await db.rows<{ attempts: number; due: boolean }>(sql`select attempts, next_attempt_at <= now() as due from kit_test.outbox`);
      expect(during).toHaveLength(40);
      // untouched: no attempt counted, no delay of their own
      expect(during.every((r) => r.attempts === 0 && r.due)).toBe(true);

      proxy.restore();
      await until(() => ids.every((id) => received.has(id)), 'every event after the reconnect');
      await until(async () => (await db.rows<{ n: number }>(sql`select count(*)::int as n from kit_test.outbox`))[0]!.n === 0, 'the outbox to empty');
      await until(() => lines.some((l) => l.msg.includes('message bus back')), 'the recovery logged');

      const relayLines = lines.filter((l) => /outbox/.test(l.msg));
      expect(relayLines.map((l) => l.msg)).toEqual([
        'outbox relay: message bus unavailable; events stay in the outbox until it is back',
        'outbox relay: message bus back, publishing the backlog',
      ]);
      const back = relayLines[1]!.obj;
      expect(back.failed_passes).toBeGreaterThanOrEqual(1);
      expect(typeof back.backlog).toBe('number');
    } finally {
      await outbox.stop(Date.now());
      await bus.close();
      await proxy.close();
    }
  });
});
