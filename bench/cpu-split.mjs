// Where the CPU goes under load: CPU microseconds per request of each process of the
// cluster (and PostgreSQL, Redis, RabbitMQ) over one autocannon run, after a warm-up
// run. A development aid, not a scenario. BENCH_PATH=get|list|post|ingest|mixed (post sends a
// fresh Idempotency-Key per request unless BENCH_NOKEY is set; ingest posts batches of 500
// environmental readings, 1 in 50 a breach (1 in BENCH_BREACH_EVERY if set, 0 none), as bench/ingest.mjs does, from 8 connections
// unless BENCH_CONNECTIONS says otherwise; mixed is bench/mixed.mjs's paced load, GET by id
// and keyed POST at once at BENCH_MIXED_GET_RATE and BENCH_MIXED_POST_RATE, per request of
// either kind; BENCH_BASELINE=1 sends it to the one-process baseline instead, on the
// same PostgreSQL, to compare the two per request), BENCH_SECONDS, BENCH_CONNECTIONS (64). With BENCH_PERF=1 the services write /tmp/perf-<pid>.map for `perf record`.
// BENCH_TABLES=1 also prints, per table written in the measured run, rows inserted,
// updated (and of those HOT, which touch no index) and deleted per request, and the
// database's transactions per request (in the `ins` column of `(transactions)`). Each
// process's read and write system calls and minor page faults per request are printed
// beside its CPU.
import { execSync } from 'node:child_process';
import pg from 'pg';
import { readFileSync } from 'node:fs';
import autocannon from 'autocannon';
import { mixedLoad } from './paced.mjs';
import { api, gatherStatistics, INGEST_BREACH_EVERY, ingestFixture, seedOrg, startCluster, startWithBaseline } from './cluster.mjs';

const PATH = process.env.BENCH_PATH ?? 'get';
const ticks = () => {
  const out = {};
  for (const pid of execSync('ls /proc')
    .toString()
    .split(/\s+/)
    .filter((x) => /^\d+$/.test(x))) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
      const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
      const t = Number(f[11]) + Number(f[12]);
      const name =
        /services\/(\w+)\/dist/.exec(cmd)?.[1] ??
        (/baseline-server/.test(cmd) ? 'baseline' : undefined) ??
        (/postgres/.test(cmd)
          ? 'postgres'
          : /redis/.test(cmd)
            ? 'redis'
            : /beam/.test(cmd)
              ? 'rabbitmq'
              : pid === String(process.pid)
                ? 'autocannon'
                : undefined);
      if (!name) continue;
      out[name] ??= { ticks: 0, sys: 0, reads: 0, writes: 0, faults: 0 };
      out[name].ticks += t;
      // of which in the kernel (system calls, the network stack, page faults)
      out[name].sys += Number(f[12]);
      // minor page faults: on this VM each costs ~20 us, so fresh memory touched per
      // request (a large object's new pages, say) shows here before it shows as CPU
      out[name].faults += Number(f[7]);
      // system calls that read and write (sockets included): on this VM a write to a
      // loopback socket costs ~100 us, more than most statements' own work
      const io = readFileSync(`/proc/${pid}/io`, 'utf8');
      out[name].reads += Number(/syscr: (\d+)/.exec(io)?.[1] ?? 0);
      out[name].writes += Number(/syscw: (\d+)/.exec(io)?.[1] ?? 0);
    } catch {}
  }
  return out;
};
async function tableCounters(url) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    // the statistics collector reports with a delay: let the last writes arrive
    await new Promise((r) => setTimeout(r, 1500));
    const { rows } = await c.query(`select schemaname || '.' || relname as name, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
      from pg_stat_user_tables`);
    // transactions of the whole database, the services' own and the relays' alike
    const { rows: db } = await c.query(`select xact_commit + xact_rollback as n from pg_stat_database where datname = current_database()`);
    return {
      ...Object.fromEntries(rows.map((r) => [r.name, [r.n_tup_ins, r.n_tup_upd, r.n_tup_hot_upd, r.n_tup_del].map(Number)])),
      '(transactions)': [Number(db[0].n), 0, 0, 0],
    };
  } finally {
    await c.end();
  }
}

const INGEST = PATH === 'ingest';
const withBaseline = PATH === 'mixed' && process.env.BENCH_BASELINE ? await startWithBaseline() : undefined;
const cluster = withBaseline?.cluster ?? (await startCluster(INGEST ? ['identity', 'audit', 'telemetry'] : undefined));
try {
  let token;
  let id;
  let opts;
  if (INGEST) {
    const fixture = await ingestFixture(cluster.url, cluster.operatorToken, Number(process.env.BENCH_BREACH_EVERY ?? INGEST_BREACH_EVERY));
    token = fixture.token;
    opts = { url: `${cluster.url}/v1/environmental-readings`, method: 'POST', body: fixture.body };
  } else if (withBaseline) {
    ({ token, sampleId: id } = withBaseline);
  } else {
    ({ token } = await seedOrg(cluster.url, cluster.operatorToken));
    for (let i = 0; i < 50; i++) id = (await api(cluster.url, 'POST', '/v1/samples', token, { name: `s${i}`, type: 'blood' })).data.id;
    opts =
      PATH === 'post'
        ? { url: `${cluster.url}/v1/samples`, method: 'POST', body: JSON.stringify({ name: 'b', type: 'blood' }) }
        : { url: `${cluster.url}${PATH === 'list' ? '/v1/samples?limit=50' : `/v1/samples/${id}`}` };
  }
  let n = 0;
  const mixed = async () => {
    const seconds = Number(process.env.BENCH_SECONDS ?? 6);
    const { get, post } = await mixedLoad(withBaseline?.baseUrl ?? cluster.url, {
      token,
      sampleId: id,
      getRate: Number(process.env.BENCH_MIXED_GET_RATE ?? 1000),
      postRate: Number(process.env.BENCH_MIXED_POST_RATE ?? 400),
      seconds,
      connections: Number(process.env.BENCH_MIXED_CONNECTIONS ?? 32),
    });
    console.log(
      `  GET p50 ${get.p50.toFixed(1)} p99 ${get.p99.toFixed(1)} ms ${get.served.toFixed(0)}/s; POST p50 ${post.p50.toFixed(1)} p99 ${post.p99.toFixed(1)} ms`,
    );
    const total = (get.served + post.served) * seconds;
    return { requests: { total, average: total / seconds }, latency: { p50: get.p50, p99: get.p99 }, non2xx: get.non2xx + post.non2xx };
  };
  const run = () =>
    PATH === 'mixed'
      ? mixed()
      : autocannon({
          ...opts,
          connections: Number(process.env.BENCH_CONNECTIONS ?? (INGEST ? 8 : 64)),
          duration: Number(process.env.BENCH_SECONDS ?? 6),
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          requests:
            PATH === 'post' && !process.env.BENCH_NOKEY
              ? [{ setupRequest: (r) => ({ ...r, headers: { ...r.headers, 'idempotency-key': `k-${Date.now()}-${n++}` } }) }]
              : undefined,
        });
  await run();
  // statistics at the size the warm-up left (autovacuum's, in a real installation):
  // a write path's warm-up grows the tables far faster than autovacuum looks, and a
  // prepared statement planned for the seeded few rows would scan (decision 067)
  await gatherStatistics(cluster.db.url);
  const tables = process.env.BENCH_TABLES ? await tableCounters(cluster.db.url) : undefined;
  const a = ticks();
  const r = await run();
  const b = ticks();
  const total = r.requests.total;
  if (tables) {
    const after = await tableCounters(cluster.db.url);
    for (const [name, c] of Object.entries(after)) {
      const d = c.map((v, i) => (v - (tables[name]?.[i] ?? 0)) / total);
      if (d.some((v) => v > 0.001))
        console.log(`  ${name.padEnd(32)} ins ${d[0].toFixed(2)} upd ${d[1].toFixed(2)} (hot ${d[2].toFixed(2)}) del ${d[3].toFixed(2)} per request`);
    }
  }
  console.log(`${PATH}: ${r.requests.average} req/s p50 ${r.latency.p50} p99 ${r.latency.p99} non2xx ${r.non2xx}`);
  const per = (k, f) => (b[k][f] - (a[k]?.[f] ?? 0)) / total;
  for (const k of Object.keys(b)) {
    console.log(
      `  ${k.padEnd(12)} ${(per(k, 'ticks') * 10_000).toFixed(0).padStart(5)} µs CPU/request (${(per(k, 'sys') * 10_000).toFixed(0).padStart(4)} in the kernel)  ${per(k, 'reads').toFixed(2).padStart(6)} reads ${per(k, 'writes').toFixed(2).padStart(6)} writes ${per(k, 'faults').toFixed(1).padStart(6)} page faults per request`,
    );
  }
} finally {
  await (withBaseline?.stop() ?? cluster.stop());
}
