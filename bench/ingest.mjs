// Environmental ingest through the whole stack: batches of 500 readings from
// BENCH_CONNECTIONS (default 8) concurrent clients, against a baseline in the same
// run: the same rows COPY'd straight into PostgreSQL by as many clients, one COPY of
// 500 rows per batch, with every column the service writes (what the database can
// take at best, minus HTTP, auth, validation, gRPC, the outbox and the audit record).
// Stack and baseline runs alternate (and swap order each run) so drift on a shared
// machine hits both alike, after BENCH_WARMUP (10) seconds of unmeasured load on each. Prints median (min-max) over BENCH_RUNS runs and writes
// bench/results/ingest.json.
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import autocannon from 'autocannon';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { v7 } from 'uuid';
import { INGEST_BATCH, ingestFixture, ingestValueAt, startCluster } from './cluster.mjs';
import { WARMUP } from './load.mjs';
import { saveResult } from './results.mjs';

const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const DURATION = Number(process.env.BENCH_SECONDS ?? 8);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 8);
const BATCH = INGEST_BATCH;
const TARGET_RATE = 50_000;
const TARGET_RATIO = 0.4;
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const fmt = (xs, d = 0) => `${median(xs).toFixed(d)} (${Math.min(...xs).toFixed(d)}-${Math.max(...xs).toFixed(d)})`;
const valueAt = ingestValueAt;

const cluster = await startCluster(['identity', 'audit', 'telemetry']);
try {
  const { org, user, token, points, body } = await ingestFixture(cluster.url, cluster.operatorToken);

  // The baseline writes the columns the service writes, in COPY text format:
  // id (UUIDv7, as the service's), org_id, point_id, value, unit, limit_min, limit_max, measured_at, sample_id,
  // notes, created_by.
  const pool = new pg.Pool({ connectionString: cluster.db.url, max: CONNECTIONS });
  const copySql = `copy telemetry.environmental_readings
    (id, org_id, point_id, value, unit, limit_min, limit_max, measured_at, sample_id, notes, created_by) from stdin`;
  const copyBatch = async () => {
    const now = new Date().toISOString();
    let text = '';
    for (let i = 0; i < BATCH; i++) {
      text += `${v7()}\t${org.id}\t${points[i % 10].id}\t${valueAt(i)}\tC\t2\t8\t${now}\t\\N\t\\N\t${user.id}\n`;
    }
    const client = await pool.connect();
    try {
      await pipeline(Readable.from([text]), client.query(copyFrom(copySql)));
    } finally {
      client.release();
    }
  };

  const runStack = async (duration = DURATION) => {
    const res = await autocannon({
      url: `${cluster.url}/v1/environmental-readings`,
      method: 'POST',
      connections: CONNECTIONS,
      duration,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body,
    });
    if (res.non2xx || res.errors) console.error(`  warning: stack run had ${res.non2xx} non-2xx, ${res.errors} errors`);
    return { rate: (res['2xx'] * BATCH) / res.duration, p50: res.latency.p50, p99: res.latency.p99 };
  };
  const runBaseline = async (duration = DURATION) => {
    let done = 0;
    const start = performance.now();
    const until = Date.now() + duration * 1000;
    await Promise.all(
      Array.from({ length: CONNECTIONS }, async () => {
        while (Date.now() < until) {
          await copyBatch();
          done++;
        }
      }),
    );
    return { rate: (done * BATCH) / ((performance.now() - start) / 1000) };
  };

  // unmeasured first, as every scenario of run.mjs: the stack's code tiered up
  // (a cold first run was a third slower) and both sides' caches warm
  if (WARMUP > 0) {
    await runStack(WARMUP);
    await runBaseline(WARMUP);
  }
  const stack = [];
  const base = [];
  for (let r = 0; r < RUNS; r++) {
    if (r % 2 === 0) {
      stack.push(await runStack());
      base.push(await runBaseline());
    } else {
      base.push(await runBaseline());
      stack.push(await runStack());
    }
    console.log(`  run ${r + 1}: stack ${stack[r].rate.toFixed(0)}/s  copy ${base[r].rate.toFixed(0)}/s  ratio ${(stack[r].rate / base[r].rate).toFixed(2)}`);
  }
  const stackRates = stack.map((x) => x.rate);
  const baseRates = base.map((x) => x.rate);
  const ratio = stackRates.map((x, i) => x / baseRates[i]);
  const pass = { rate: median(stackRates) >= TARGET_RATE, ratio: median(ratio) >= TARGET_RATIO };
  console.log(
    `environmental ingest (${BATCH}/batch, ${CONNECTIONS} clients): stack ${fmt(stackRates)} readings/s  COPY ${fmt(baseRates)} readings/s  ` +
      `ratio ${fmt(ratio, 2)}  pass: rate>=${TARGET_RATE} ${pass.rate}, ratio>=${TARGET_RATIO} ${pass.ratio}`,
  );
  const setup = { runs: RUNS, seconds: DURATION, connections: CONNECTIONS, batch: BATCH };
  const result = {
    scenario: 'environmental ingest',
    stack_readings_per_s: stackRates,
    copy_readings_per_s: baseRates,
    ratio,
    median: { stack: median(stackRates), copy: median(baseRates), ratio: median(ratio) },
    stack_p50_ms: stack.map((x) => x.p50),
    stack_p99_ms: stack.map((x) => x.p99),
    targets: { stack_readings_per_s: TARGET_RATE, ratio_of_copy: TARGET_RATIO },
    pass,
  };
  const rows = [
    {
      scenario: `Environmental ingest (${BATCH}/batch, ${CONNECTIONS} clients)`,
      measured: `${fmt(stackRates)} readings/s vs COPY ${fmt(baseRates)}: ratio ${fmt(ratio, 2)}`,
      target: `>= ${TARGET_RATE} readings/s and ratio >= ${TARGET_RATIO}`,
      pass: pass.rate && pass.ratio,
    },
  ];
  saveResult('ingest', { setup, results: [result], rows });
  await pool.end();
} finally {
  await cluster.stop();
}
