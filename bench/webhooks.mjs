// Webhook fan-out: sample.created events delivered signed to local receivers.
//
// BENCH_SUBSCRIPTIONS (default 8) subscriptions of one org, each to its own
// receiver port with its own secret, so every event becomes that many
// deliveries and the delivery rate can exceed the write rate. Every signature is
// checked against the subscription's secret; every (subscription, sample) pair
// written must arrive; a delivery id seen twice is a duplicate (allowed by
// at-least-once, but counted).
//
// Phase 1 (capacity): the receivers hold their answers while BENCH_EVENTS
// (default 2000) writes by BENCH_CONNECTIONS (32) writers go in and are fanned
// out (the webhooks service keeps at most its concurrency in flight, the rest
// waits in its table); then the receivers answer and the backlog drains. So the
// delivery rate is the webhooks service's own (claim, sign, send, record), not
// the write rate of the gateway->notebook->outbox path in front of it.
// Deliveries/s is measured over the steady part (receipts between the 10th and
// the 90th percentile of receipt time), so ramp-up and tail do not count.
// Phase 2 (latency): writes paced at half the phase-1 delivery rate (divided by
// the subscriptions) for BENCH_SECONDS (default 10), or at BENCH_PACED_DELIVERIES
// deliveries/s; p99 commit-to-delivery (sample created_at to receipt) must stay
// under 1 s. The paced latency is split at the delivery row's created_at: commit
// to stored (notebook outbox relay, broker, fan-out) and stored to received
// (the delivery worker).
//
// Also reports the CPU the webhooks process spent per delivery (less noisy than
// rates on a shared machine). Writes bench/results/webhooks.json.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { createServer } from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { api, freePort, seedOrg, startCluster } from './cluster.mjs';
import { saveResult } from './results.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const SUBS = Number(process.env.BENCH_SUBSCRIPTIONS ?? 8);
const EVENTS = Number(process.env.BENCH_EVENTS ?? 2000);
const WRITERS = Number(process.env.BENCH_CONNECTIONS ?? 32);
const PACED_SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const TARGET_RATE = 1000;
const TARGET_P99_MS = 1000;
const pct = (xs, p) => (xs.length ? [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((xs.length * p) / 100))] : NaN);

/** One phase's receipts. */
class Tally {
  constructor() {
    this.ids = new Set();
    this.pairs = new Set();
    this.times = [];
    this.receipts = [];
    this.latencies = [];
    this.duplicates = 0;
    this.bad = 0;
  }
}
let tally = new Tally();
let paused = false;
const held = [];

const receivers = [];
for (let i = 0; i < SUBS; i++) {
  const r = { index: i, port: await freePort(), secret: '' };
  r.server = createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => (paused ? held.push(answer) : answer()));
    const answer = () => {
      const now = Date.now();
      const raw = Buffer.concat(chunks);
      const t = tally;
      const m = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(String(req.headers['x-service-signature'] ?? ''));
      const want = m && createHmac('sha256', r.secret).update(`${m[1]}.`).update(raw).digest();
      if (!m || !timingSafeEqual(want, Buffer.from(m[2], 'hex'))) t.bad++;
      const env = JSON.parse(raw.toString());
      const id = String(req.headers['x-service-delivery'] ?? '');
      if (id !== env.id) t.bad++;
      if (t.ids.has(id)) t.duplicates++;
      else {
        t.ids.add(id);
        t.pairs.add(`${r.index}/${env.data.id}`);
        t.times.push(now);
        t.latencies.push(now - Date.parse(env.data.created_at));
        t.receipts.push([id, now, Date.parse(env.data.created_at)]);
      }
      res.writeHead(204).end();
    };
  });
  await new Promise((ok) => r.server.listen(r.port, '127.0.0.1', ok));
  receivers.push(r);
}

/** CPU ticks (1/100 s) of the webhooks process. */
function webhooksTicks() {
  for (const pid of readdirSync('/proc').filter((x) => /^\d+$/.test(x))) {
    try {
      if (!readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(`services/webhooks/dist/main.js`)) continue;
      const env = readFileSync(`/proc/${pid}/environ`, 'utf8');
      if (!env.includes(`DATABASE_URL=${cluster.db.url}`)) continue;
      const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
      return Number(f[11]) + Number(f[12]);
    } catch {}
  }
  return NaN;
}

async function waitFor(want, ms) {
  const deadline = Date.now() + ms;
  let lastSize = -1;
  let stillSince = Date.now();
  while (tally.ids.size < want && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    if (tally.ids.size !== lastSize) {
      lastSize = tally.ids.size;
      stillSince = Date.now();
    } else if (Date.now() - stillSince > 30_000) break;
  }
  // late duplicates (a retried attempt) still count
  await new Promise((r) => setTimeout(r, 500));
}

function summarise(t, written, elapsedMs, cpuTicks) {
  const expected = written.length * SUBS;
  let missing = 0;
  for (const r of receivers) for (const id of written) if (!t.pairs.has(`${r.index}/${id}`)) missing++;
  const times = [...t.times].sort((a, b) => a - b);
  const lo = Math.floor(times.length * 0.1);
  const hi = Math.max(lo, Math.floor(times.length * 0.9) - 1);
  const steady = times.length > 10 && times[hi] > times[lo] ? ((hi - lo) / (times[hi] - times[lo])) * 1000 : NaN;
  return {
    events: written.length,
    events_per_s: +((written.length / elapsedMs) * 1000).toFixed(1),
    deliveries_expected: expected,
    deliveries: t.ids.size,
    deliveries_per_s: +steady.toFixed(1),
    deliveries_per_s_first_to_last: times.length > 1 ? +(((times.length - 1) / (times.at(-1) - times[0])) * 1000).toFixed(1) : NaN,
    commit_to_delivery_p50_ms: pct(t.latencies, 50),
    commit_to_delivery_p99_ms: pct(t.latencies, 99),
    commit_to_delivery_max_ms: pct(t.latencies, 100),
    bad_signatures: t.bad,
    duplicates: t.duplicates,
    missing,
    webhooks_cpu_us_per_delivery: t.ids.size ? Math.round((cpuTicks * 10_000) / t.ids.size) : NaN,
  };
}

const cluster = await startCluster(['identity', 'notebook', 'audit', 'webhooks'], {
  webhooks: {
    LAB_WEBHOOKS_ALLOW_PRIVATE_NETWORKS: 'true',
    LAB_WEBHOOKS_CONCURRENCY: process.env.BENCH_WEBHOOKS_CONCURRENCY ?? '64',
    LAB_WEBHOOKS_PER_HOST_CONCURRENCY: process.env.BENCH_WEBHOOKS_PER_HOST_CONCURRENCY ?? '16',
    // the held requests of phase 1 must not time out while the backlog builds
    LAB_WEBHOOKS_TIMEOUT_MS: '120000',
    // a development aid: e.g. --require a query counter into the webhooks process only
    ...(process.env.BENCH_WEBHOOKS_NODE_OPTIONS ? { NODE_OPTIONS: process.env.BENCH_WEBHOOKS_NODE_OPTIONS } : {}),
  },
});
let exitCode = 0;
try {
  const { org, token } = await seedOrg(cluster.url, cluster.operatorToken);
  for (const r of receivers) {
    const sub = (
      await api(cluster.url, 'POST', `/admin/v1/orgs/${org.id}/webhook-subscriptions`, cluster.operatorToken, {
        url: `http://127.0.0.1:${r.port}/hook/${r.index}`,
        events: ['sample.created'],
      })
    ).data;
    r.secret = sub.secret;
  }
  const write = async () => (await api(cluster.url, 'POST', '/v1/samples', token, { name: 'hook' })).data.id;

  // phase 1: build the backlog with the receivers holding their answers, then drain it
  const db = new pg.Client({ connectionString: cluster.db.url });
  await db.connect();
  const stored = async () => Number((await db.query('select count(*)::int as n from webhooks.deliveries')).rows[0].n);
  tally = new Tally();
  paused = true;
  const written1 = [];
  let next = 0;
  const cpuW0 = webhooksTicks();
  const started = Date.now();
  await Promise.all(
    Array.from({ length: WRITERS }, async () => {
      while (next < EVENTS) {
        next++;
        written1.push(await write());
      }
    }),
  );
  const wrote1 = Date.now() - started;
  const fanDeadline = Date.now() + 180_000;
  while ((await stored()) < EVENTS * SUBS && Date.now() < fanDeadline) await new Promise((r) => setTimeout(r, 100));
  const fannedOut = Date.now() - started;
  const fanOutCpu = webhooksTicks() - cpuW0;
  await db.end();
  const cpu0 = webhooksTicks();
  paused = false;
  for (const answer of held.splice(0)) answer();
  await waitFor(EVENTS * SUBS, 180_000);
  const capacity = {
    ...summarise(tally, written1, wrote1, webhooksTicks() - cpu0),
    // receipt minus commit here is the age of the backlog, not a latency
    commit_to_delivery_p50_ms: null,
    commit_to_delivery_p99_ms: null,
    commit_to_delivery_max_ms: null,
    backlog_built_ms: fannedOut,
    fan_out_cpu_us_per_event: Math.round((fanOutCpu * 10_000) / EVENTS),
  };

  // phase 2: paced at half the measured delivery rate (open loop: a write starts on schedule, not when the previous ends)
  // BENCH_PACED_DELIVERIES fixes the offered rate instead (to compare two builds at one load)
  const deliveryRate =
    Number(process.env.BENCH_PACED_DELIVERIES ?? 0) || (Number.isFinite(capacity.deliveries_per_s) ? capacity.deliveries_per_s : TARGET_RATE) / 2;
  const eventRate = deliveryRate / SUBS;
  tally = new Tally();
  const written2 = [];
  const total = Math.max(1, Math.round(eventRate * PACED_SECONDS));
  const cpu1 = webhooksTicks();
  const start2 = Date.now();
  const pending = [];
  for (let i = 0; i < total; i++) {
    const due = start2 + (i * 1000) / eventRate;
    const wait = due - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    pending.push(write().then((id) => written2.push(id)));
  }
  await Promise.all(pending);
  const wrote2 = Date.now() - start2;
  await waitFor(total * SUBS, 60_000);
  const paced = summarise(tally, written2, wrote2, webhooksTicks() - cpu1);
  // where the time goes: commit to the delivery row (notebook outbox relay, broker, fan-out) and row to receipt (the delivery worker)
  {
    const c = new pg.Client({ connectionString: cluster.db.url });
    await c.connect();
    const stamps = new Map(
      (
        await c.query(`select id::text, (extract(epoch from created_at) * 1000)::float8 as at from webhooks.deliveries where id = any($1::uuid[])`, [
          tally.receipts.map((r) => r[0]),
        ])
      ).rows.map((r) => [r.id, r.at]),
    );
    await c.end();
    const toRow = [];
    const toReceipt = [];
    for (const [id, at, committed] of tally.receipts) {
      const row = stamps.get(id);
      if (row === undefined) continue;
      toRow.push(Math.round(row - committed));
      toReceipt.push(Math.round(at - row));
    }
    Object.assign(paced, {
      commit_to_stored_p50_ms: pct(toRow, 50),
      commit_to_stored_p99_ms: pct(toRow, 99),
      stored_to_delivery_p50_ms: pct(toReceipt, 50),
      stored_to_delivery_p99_ms: pct(toReceipt, 99),
    });
  }

  const pass = {
    deliveries_per_s: capacity.deliveries_per_s >= TARGET_RATE,
    p99_commit_to_delivery_at_half_rate: paced.commit_to_delivery_p99_ms < TARGET_P99_MS,
    no_bad_signatures: capacity.bad_signatures + paced.bad_signatures === 0,
    no_missing: capacity.missing + paced.missing === 0,
  };
  const line = (label, f) =>
    console.log(
      `${label}: ${f.deliveries}/${f.deliveries_expected} delivered (${SUBS} subscriptions); events ${f.events_per_s}/s; ` +
        `deliveries ${f.deliveries_per_s}/s steady (${f.deliveries_per_s_first_to_last}/s first to last); ` +
        `commit-to-delivery p50 ${f.commit_to_delivery_p50_ms} ms, p99 ${f.commit_to_delivery_p99_ms} ms; ` +
        `bad signatures ${f.bad_signatures}, duplicates ${f.duplicates}, missing ${f.missing}; webhooks CPU ${f.webhooks_cpu_us_per_delivery} µs/delivery`,
    );
  line('webhook fan-out capacity (backlog drain)', capacity);
  console.log(
    `  backlog of ${EVENTS * SUBS} deliveries stored ${capacity.backlog_built_ms} ms after the first write; fan-out CPU ${capacity.fan_out_cpu_us_per_event} µs/event`,
  );
  line(`webhook fan-out paced (${eventRate.toFixed(1)} events/s = ${deliveryRate.toFixed(0)} deliveries/s offered)`, paced);
  console.log(
    `  paced split: commit to delivery row stored p50 ${paced.commit_to_stored_p50_ms} ms, p99 ${paced.commit_to_stored_p99_ms} ms (outbox relay, broker, fan-out); ` +
      `stored to received p50 ${paced.stored_to_delivery_p50_ms} ms, p99 ${paced.stored_to_delivery_p99_ms} ms (delivery worker)`,
  );
  console.log(`deliveries/s ${capacity.deliveries_per_s} (target >= ${TARGET_RATE}): ${pass.deliveries_per_s ? 'PASS' : 'FAIL'}`);
  console.log(
    `p99 commit-to-delivery at half rate ${paced.commit_to_delivery_p99_ms} ms (target < ${TARGET_P99_MS} ms): ${pass.p99_commit_to_delivery_at_half_rate ? 'PASS' : 'FAIL'}`,
  );
  console.log(
    `bad signatures ${capacity.bad_signatures + paced.bad_signatures}, duplicates ${capacity.duplicates + paced.duplicates}, missing ${capacity.missing + paced.missing}`,
  );

  const rows = [
    {
      scenario: 'Webhook fan-out, capacity',
      measured: `${capacity.deliveries_per_s} signed deliveries/s (${SUBS} subscriptions); bad signatures ${capacity.bad_signatures}, missing ${capacity.missing}`,
      target: `>= ${TARGET_RATE} deliveries/s`,
      pass: pass.deliveries_per_s && capacity.bad_signatures === 0 && capacity.missing === 0,
    },
    {
      scenario: 'Webhook fan-out, paced at half rate',
      measured: `commit-to-delivery p50 ${paced.commit_to_delivery_p50_ms} ms, p99 ${paced.commit_to_delivery_p99_ms} ms at ${paced.deliveries_per_s} deliveries/s`,
      target: `p99 < ${TARGET_P99_MS} ms`,
      pass: pass.p99_commit_to_delivery_at_half_rate && paced.bad_signatures === 0 && paced.missing === 0,
    },
  ];
  saveResult('webhooks', {
    rows,
    scenario: 'webhooks',
    targets: {
      deliveries_per_s: TARGET_RATE,
      p99_commit_to_delivery_ms_at_half_rate: TARGET_P99_MS,
      text: 'Webhook fan-out: events to a local receiver. At least 1,000 signed deliveries/s and p99 commit-to-delivery under 1 s at half that rate.',
    },
    setup: { subscriptions: SUBS, events: EVENTS, writers: WRITERS, paced_seconds: PACED_SECONDS, paced_events_per_s: +eventRate.toFixed(1) },
    figures: { capacity, paced },
    pass,
  });
  if (!pass.no_bad_signatures || !pass.no_missing) exitCode = 1;
} finally {
  await cluster.stop();
  for (const r of receivers) r.server.close();
}
process.exit(exitCode);
