import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type ChannelModel } from 'amqplib';
import pg from 'pg';
import { messagesIn } from '@lab/kit';
import { freePort } from '../../src/cluster';
import { deleteRunQueues } from '../../src/queues';
import { waitFor } from '../../src/waits';
import { describeWithServers } from '../../src/servers';

/**
 * SIGTERM with a large outbox backlog: a service process (the built telemetry
 * service, as a pod runs it) given 100,000 queued breach events stops within
 * 20 s (the bound a 30-second termination grace period leaves room for), and
 * nothing is lost: what it published before it exited plus what it left in the
 * outbox is every event, and the next start publishes the rest.
 */
const EVENTS = 100_000;
const STOP_BOUND_MS = 20_000;
const root = join(__dirname, '..', '..', '..');
const databaseUrl = process.env.DATABASE_URL;
const amqpUrl = process.env.AMQP_URL;
const describeIf = (title: string, body: () => void) => describeWithServers(['postgres', 'rabbitmq'], title, body);

describeIf('a service stopped with a large outbox backlog', () => {
  jest.setTimeout(300_000);
  const dbName = `lab_cluster_${randomBytes(5).toString('hex')}`;
  const exchange = `lab.cluster.${randomBytes(4).toString('hex')}`;
  let url: string;
  let admin: pg.Client;
  let db: pg.Client;
  let conn: ChannelModel;
  let dataDir: string;
  let child: ChildProcess | undefined;
  let output = '';
  /** ids of every breach event the broker routed to this test's queue */
  const delivered = new Set<string>();

  beforeAll(async () => {
    admin = new pg.Client({ connectionString: databaseUrl });
    await admin.connect();
    await admin.query(`create database ${dbName}`);
    const u = new URL(databaseUrl!);
    u.pathname = `/${dbName}`;
    url = u.toString();
    db = new pg.Client({ connectionString: url });
    await db.connect();
    dataDir = await mkdtemp(join(tmpdir(), 'lab-outbox-stop-'));
    // the test's own queue (exclusive: gone with its connection) sees every event published
    conn = await connect(amqpUrl!);
    const ch = await conn.createChannel();
    await ch.assertExchange(exchange, 'topic', { durable: true });
    const q = await ch.assertQueue('', { exclusive: true });
    await ch.bindQueue(q.queue, exchange, 'environmental.breach');
    await ch.prefetch(2_000);
    await ch.consume(q.queue, (m) => {
      if (!m) return;
      // breach events travel in bundles (decision 035): each one counts
      for (const e of messagesIn(m)) delivered.add(e.id);
      ch.ack(m);
    });
  });

  afterAll(async () => {
    if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await conn?.close().catch(() => undefined);
    await db?.end().catch(() => undefined);
    await admin?.query(`drop database if exists ${dbName} with (force)`).catch(() => undefined);
    await admin?.end().catch(() => undefined);
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
    await deleteRunQueues(amqpUrl!, exchange);
  });

  /** Starts the telemetry service process; resolves once it is ready. */
  async function start(): Promise<ChildProcess> {
    const env = {
      ...process.env,
      DATABASE_URL: url,
      AMQP_URL: amqpUrl!,
      LAB_INTERNAL_SECRET: randomBytes(24).toString('hex'),
      LAB_EVENTS_EXCHANGE: exchange,
      LAB_BUS_QUEUE_EXPIRES_MS: '600000',
      LAB_DATA_DIR: dataDir,
      GRPC_HOST: '127.0.0.1',
      GRPC_PORT: String(await freePort()),
      METRICS_PORT: String(await freePort()),
      LOG_LEVEL: 'info',
    };
    // the chart's default (LAB_OUTBOX_STOP_FLUSH_MS unset) is what is tested
    delete (env as Record<string, string | undefined>).LAB_OUTBOX_STOP_FLUSH_MS;
    output = '';
    const proc = spawn(process.execPath, [join(root, 'services/telemetry/dist/main.js')], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    child = proc;
    await new Promise<void>((resolve, reject) => {
      const onData = (b: Buffer) => {
        output = (output + b.toString()).slice(-20_000);
        if (output.includes('telemetry ready')) {
          proc.stdout.off('data', onData);
          resolve();
        }
      };
      proc.stdout.on('data', onData);
      proc.stderr.on('data', (b: Buffer) => (output = (output + b.toString()).slice(-20_000)));
      proc.once('exit', (code) => reject(new Error(`telemetry exited (${code}) before it was ready:\n${output}`)));
    });
    proc.stdout.on('data', (b: Buffer) => (output = (output + b.toString()).slice(-20_000)));
    return proc;
  }

  /** SIGTERM; resolves with the exit code and how long the process took to go. */
  function terminate(proc: ChildProcess): Promise<{ code: number | string | null; ms: number }> {
    const at = Date.now();
    const gone = new Promise<{ code: number | string | null; ms: number }>((resolve) =>
      proc.once('exit', (code, signal) => resolve({ code: code ?? signal, ms: Date.now() - at })),
    );
    proc.kill('SIGTERM');
    return gone;
  }

  const outboxIds = async () => new Set((await db.query<{ id: string }>('select id::text from telemetry.outbox')).rows.map((r) => r.id));

  async function until(cond: () => boolean | Promise<boolean>, what: string, ms: number) {
    try {
      await waitFor(what, cond, { timeoutMs: ms, intervalMs: 200 });
    } catch (err) {
      const left = (await db.query<{ n: number }>('select count(*)::int as n from telemetry.outbox')).rows[0]!.n;
      throw new Error(`${(err as Error).message} (${delivered.size} delivered, ${left} in the outbox):\n${output.slice(-3000)}`);
    }
  }

  it('stops within 20 s whatever the backlog, and loses nothing: the rest goes out on the next start', async () => {
    // a first start creates the schema; then the backlog is queued while it is down
    expect((await terminate(await start())).code).toBe(0);
    await db.query(
      `insert into telemetry.outbox (id, type, message)
       select e.id, 'environmental.breach', jsonb_build_object('id', e.id, 'type', 'environmental.breach', 'org_id', null,
         'occurred_at', now(), 'data', jsonb_build_object('reading_id', gen_random_uuid(), 'value', e.g))
       from (select gen_random_uuid() as id, g from generate_series(1, $1::int) g) e`,
      [EVENTS],
    );
    const queued = await outboxIds();
    expect(queued.size).toBe(EVENTS);

    // stopped as soon as it is ready, its relay in the middle of the backlog
    const stopped = await terminate(await start());
    if (stopped.code !== 0) throw new Error(`exit ${stopped.code}:\n${output.slice(-4000)}`);
    expect(stopped.ms).toBeLessThan(STOP_BOUND_MS);

    // nothing lost: every event is either published (it reaches the queue) or still in the outbox
    const left = await outboxIds();
    await until(() => [...queued].every((id) => delivered.has(id) || left.has(id)), 'what was published to arrive', 120_000);
    expect([...left].every((id) => queued.has(id))).toBe(true);

    // the next start publishes the rest
    const again = await start();
    await until(async () => (await outboxIds()).size === 0, 'the outbox to empty', 120_000);
    expect((await terminate(again)).code).toBe(0);
    await until(() => delivered.size >= EVENTS, 'every event to arrive', 120_000);
    expect([...queued].filter((id) => !delivered.has(id))).toEqual([]);
    expect(delivered.size).toBe(EVENTS);
  });
});
