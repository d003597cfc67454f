// The outbox relay's drain rate: BENCH_EVENTS (default 100,000) environmental.breach
// events queued in one service's outbox (inserted straight into the table, as a
// burst of breaching readings leaves them), then the relay started and timed
// until the outbox is empty.
//
// Shapes (BENCH_SHAPES, default "cluster,embedded"):
// - cluster: PostgreSQL (a fresh database on DATABASE_URL) and RabbitMQ (AMQP_URL),
//   publishing with confirms to a topic exchange with one durable queue bound to
//   the events (the bus's queue type, LAB_BUS_QUEUE_TYPE, default quorum), as a
//   service process of the cluster does;
// - embedded: PGlite in a temporary directory and the in-process bus, with the two
//   consumers breach events have in the standalone (notifications' reactions and
//   webhooks' delivery fan-out), each recording the message id in its inbox in
//   the same database, as consumeWithInbox does; their own work is left out, so
//   the figure is the relay's and the bus's path, not the consumers'.
//
// BENCH_KIT picks the kit to measure (default libs/kit/dist; a copy of an older
// build gives the baseline). BENCH_RUNS (default 3) runs per shape, median
// (min-max) printed. A run that has not emptied the outbox after BENCH_LIMIT_S
// (default 120) seconds is cut there: its rate is what it published by then.
// Everything it creates (database, exchange, queue, directory) is removed.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import amqp from 'amqplib';
import pg from 'pg';
import { machine, saveResult } from './results.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const kitPath = resolve(process.env.BENCH_KIT ?? join(here, '..', 'libs', 'kit', 'dist', 'index.js'));
const kit = require(kitPath);
const { sql } = require('drizzle-orm');

const EVENTS = Number(process.env.BENCH_EVENTS ?? 100_000);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const LIMIT_S = Number(process.env.BENCH_LIMIT_S ?? 120);
const SHAPES = (process.env.BENCH_SHAPES ?? 'cluster,embedded').split(',');
const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const AMQP_URL = process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const log = kit.createLogger('bench', 'silent');
const SCHEMA = 'telemetry';
/** No migrations of its own: the kit's tables (outbox, inbox) are what the runs need. */
const noMigrations = mkdtempSync(join(tmpdir(), 'bench-migrations-'));
process.on('exit', () => rmSync(noMigrations, { recursive: true, force: true }));

/** The breach events of EVENTS readings, in one statement (ids match the envelopes). */
const queueEvents = (n) =>
  sql.raw(`insert into ${SCHEMA}.outbox (id, type, message)
    select e.id, 'environmental.breach', jsonb_build_object(
      'id', e.id, 'type', 'environmental.breach', 'org_id', '01a216d0-0000-7000-8000-000000000001',
      'occurred_at', now(), 'request_id', 'bench-' || e.g,
      'data', jsonb_build_object('reading_id', gen_random_uuid(), 'point_id', '01a216d0-0000-7000-8000-0000000000aa',
        'external_code', 'FRIDGE-1', 'parameter', 'temperature', 'value', 9.5 + e.g % 10, 'unit', 'C',
        'limit_min', 2, 'limit_max', 8, 'measured_at', now()))
    from (select gen_random_uuid() as id, g from generate_series(1, ${n}) g) e`);

const left = async (db) => (await db.rows(sql.raw(`select count(*)::int as n from ${SCHEMA}.outbox`)))[0].n;

/** Starts the relay over a full outbox and waits until it is empty (or the limit). */
async function timeDrain(db, bus, counted) {
  await db.orm.execute(queueEvents(EVENTS));
  await db.orm.execute(sql.raw(`analyze ${SCHEMA}.outbox`));
  // BENCH_BATCH, BENCH_CONCURRENCY (and BENCH_CHANNELS, the bus's) try other relay settings (kits that have them)
  const tuning = {
    ...(process.env.BENCH_BATCH ? { batchSize: Number(process.env.BENCH_BATCH) } : {}),
    ...(process.env.BENCH_CONCURRENCY ? { concurrency: Number(process.env.BENCH_CONCURRENCY) } : {}),
  };
  const outbox = new kit.Outbox({ service: 'bench', schema: SCHEMA, db, bus, log, ...tuning });
  const start = process.hrtime.bigint();
  outbox.start();
  const deadline = Date.now() + LIMIT_S * 1000;
  // the published count says when to look; the table says when the drain is done
  while (Date.now() < deadline && (counted.n < EVENTS || (await left(db)) > 0)) await new Promise((r) => setTimeout(r, 50));
  const s = Number(process.hrtime.bigint() - start) / 1e9;
  const published = counted.n;
  // a run cut at the limit: the bus goes first, so that the relay's stop (which
  // drained everything, however long, before the stop was bounded) ends at once
  if (published < EVENTS) await bus.close();
  await outbox.stop();
  return { published, seconds: +s.toFixed(2), per_s: Math.round(published / s), complete: published >= EVENTS };
}

/** A bus that counts what its inner bus took (confirmed or handled). */
function counting(inner, counted) {
  return {
    publish: async (messages) => {
      await inner.publish(messages);
      counted.n += messages.length;
    },
    subscribe: (o) => inner.subscribe(o),
    get connected() {
      return inner.connected;
    },
    deliversInProcess: inner.deliversInProcess,
    close: () => inner.close(),
  };
}

async function clusterRun() {
  const name = `lab_bench_drain_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  await admin.query(`create database ${name}`);
  const url = new URL(DATABASE_URL);
  url.pathname = `/${name}`;
  const exchange = `bench.drain.${randomBytes(3).toString('hex')}`;
  const queue = `${exchange}.breaches`;
  const db = await kit.openDatabase({ url: url.toString(), poolSize: 4, name: 'bench-drain' });
  let bus;
  try {
    await kit.migrate(db, SCHEMA, noMigrations);
    bus = await kit.AmqpBus.connect(AMQP_URL, exchange, log, {
      declare: [{ queue: 'breaches', bindings: ['environmental.breach'] }],
      queueType: process.env.LAB_BUS_QUEUE_TYPE ?? 'quorum',
      queueExpiresMs: 600_000,
      ...(process.env.BENCH_CHANNELS ? { publishChannels: Number(process.env.BENCH_CHANNELS) } : {}),
    });
    const counted = { n: 0 };
    return await timeDrain(db, counting(bus, counted), counted);
  } finally {
    await bus?.close();
    await db.close();
    const conn = await amqp.connect(AMQP_URL);
    const ch = await conn.createChannel();
    for (const q of [queue, `${queue}.retry`, `${queue}.dlq`]) await ch.deleteQueue(q).catch(() => undefined);
    await ch.deleteExchange(exchange).catch(() => undefined);
    await conn.close();
    await admin.query(`drop database if exists ${name} with (force)`);
    await admin.end();
  }
}

async function embeddedRun() {
  const dir = mkdtempSync(join(tmpdir(), 'bench-drain-'));
  const db = await kit.openDatabase({ dataDir: dir });
  const bus = new kit.MemoryBus(log);
  try {
    await kit.migrate(db, SCHEMA, noMigrations);
    for (const [schema, queue, bindings] of [
      ['notifications', 'notifications.reactions', ['environmental.breach', 'job.updated']],
      ['webhooks', 'webhooks.deliveries', ['environmental.#']],
    ]) {
      await kit.migrate(db, schema, noMigrations);
      await kit.consumeWithInbox({ bus, db, schema, queue, bindings, handler: async () => undefined });
    }
    const counted = { n: 0 };
    return await timeDrain(db, counting(bus, counted), counted);
  } finally {
    await bus.close();
    await db.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function main() {
  const out = { kit: kitPath, events: EVENTS, runs: RUNS, shapes: {} };
  for (const shape of SHAPES) {
    const runs = [];
    for (let r = 0; r < RUNS; r++) {
      const run = shape === 'cluster' ? await clusterRun() : await embeddedRun();
      console.error(`  ${shape} run ${r + 1}: ${JSON.stringify(run)}`);
      runs.push(run);
    }
    const rates = runs.map((x) => x.per_s);
    out.shapes[shape] = { runs, median_per_s: median(rates), min_per_s: Math.min(...rates), max_per_s: Math.max(...rates) };
    console.log(
      `${shape}: ${median(rates)} events/s (${Math.min(...rates)}-${Math.max(...rates)}), ${runs.filter((x) => x.complete).length}/${runs.length} runs drained all ${EVENTS}`,
    );
  }
  // the table bench/report.mjs prints: the drain targets per shape
  const TARGETS = { cluster: 5_000, embedded: 2_000 };
  out.rows = Object.entries(out.shapes).map(([shape, r]) => ({
    scenario: `outbox drain, ${EVENTS} events queued (${shape})`,
    measured: `${r.median_per_s} (${r.min_per_s}-${r.max_per_s}) events/s`,
    target: `>= ${TARGETS[shape]} events/s`,
    pass: r.median_per_s >= TARGETS[shape],
  }));
  out.meta = machine();
  if (process.env.BENCH_SAVE !== '0') saveResult(process.env.BENCH_RESULT_NAME ?? 'outbox-drain', out);
  console.log(JSON.stringify(out));
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
