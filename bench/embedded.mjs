// The embedded write path: `npm start` (PGlite, the in-process bus) under GET by id
// and keyed POST /v1/samples at saturation, against the one-process express + pg
// baseline on this machine's PostgreSQL in the same run, alternated. The baseline's
// database is migrated and seeded by the same standalone process pointed at
// PostgreSQL (then stopped), so both sides hold the same tables. After the runs the
// embedded process's RSS is read: the figure is its VmRSS after a 30 s keyed load.
// Targets: keyed POST >= 0.40 and GET >= 0.50 of the baseline, RSS < 400 MB.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { api, freePort, freshDatabase, seedOrg, spawnNode } from './cluster.mjs';
import { fmt, load, median, RUNS, WARMUP } from './load.mjs';
import { describeMachine, watchMachine } from './machine-stalls.mjs';
import { saveResult } from './results.mjs';
import { rssBytes, startStandalone } from './standalone.mjs';

const TARGET_POST = 0.4;
const TARGET_GET = 0.5;
const TARGET_RSS_MB = 400;
/** The load after which the RSS is read, as the figure asks: 30 s. */
const RSS_LOAD_SECONDS = Number(process.env.BENCH_EMBEDDED_RSS_SECONDS ?? 30);

/** An org, its key and 200 samples; the id of the last. */
async function seed(server) {
  const { token } = await seedOrg(server.url, server.operatorToken);
  let sampleId;
  for (let i = 0; i < 200; i++) sampleId = (await api(server.url, 'POST', '/v1/samples', token, { name: `seed-${i}`, type: 'blood' })).data.id;
  return { token, sampleId };
}

async function main() {
  const work = await mkdtemp(join(tmpdir(), 'lab-bench-embedded-'));
  const db = await freshDatabase();
  let embedded;
  let baseline;
  try {
    // the baseline's tables and rows, written by the service itself on PostgreSQL
    const onServer = await startStandalone(join(work, 'server-data'), { DATABASE_URL: db.url });
    const baseSeed = await seed(onServer);
    await onServer.stop();
    const baselinePort = await freePort();
    baseline = await spawnNode('bench/baseline-server.mjs', { DATABASE_URL: db.url, PORT: String(baselinePort) }, 'baseline ready', 'baseline');
    const baseUrl = `http://127.0.0.1:${baselinePort}`;

    embedded = await startStandalone(join(work, 'embedded-data'));
    const { token, sampleId } = await seed(embedded);
    const scenarios = [
      { key: 'get', name: 'GET /v1/samples/{id}', target: TARGET_GET, opts: {}, path: (id) => `/v1/samples/${id}` },
      {
        key: 'post',
        name: 'POST /v1/samples + Idempotency-Key',
        target: TARGET_POST,
        opts: { method: 'POST', body: { name: 'bench', type: 'blood' }, idempotent: true },
        path: () => '/v1/samples',
      },
    ];
    const rows = [];
    const results = [];
    for (const s of scenarios) {
      const mine = { url: `${embedded.url}${s.path(sampleId)}`, token };
      const theirs = { url: `${baseUrl}${s.path(baseSeed.sampleId)}`, token: baseSeed.token };
      if (WARMUP > 0) {
        await load(mine.url, { token: mine.token, ...s.opts, duration: WARMUP });
        await load(theirs.url, { token: theirs.token, ...s.opts, idempotent: false, duration: WARMUP });
      }
      const stack = [];
      const base = [];
      const watch = watchMachine();
      for (let r = 0; r < RUNS; r++) {
        stack.push(await load(mine.url, { token: mine.token, ...s.opts }));
        base.push(await load(theirs.url, { token: theirs.token, ...s.opts, idempotent: false }));
      }
      const machine = watch.stop();
      const ratio = stack.map((x, i) => x.rps / base[i].rps);
      const pass = median(ratio) >= s.target;
      rows.push({
        scenario: `Embedded (npm start, PGlite): ${s.name}`,
        measured: `${fmt(stack.map((x) => x.rps))} req/s vs baseline ${fmt(base.map((x) => x.rps))}: ratio ${fmt(ratio, 2)}; p99 ${fmt(stack.map((x) => x.p99))} ms`,
        target: `ratio >= ${s.target.toFixed(2)}`,
        pass,
      });
      results.push({ scenario: s.name, stack_rps: stack.map((x) => x.rps), baseline_rps: base.map((x) => x.rps), ratio, machine, pass });
      console.log(`${rows.at(-1).scenario}: ${rows.at(-1).measured}\n  ${describeMachine(machine)}`);
    }
    // the RSS the process holds right after a long keyed load
    await load(`${embedded.url}/v1/samples`, { token, ...scenarios[1].opts, duration: RSS_LOAD_SECONDS });
    const rss = await rssBytes(embedded.pid);
    const rssMb = rss / 1e6;
    rows.push({
      scenario: `Embedded: RSS right after ${RSS_LOAD_SECONDS} s of keyed POST`,
      measured: `${rssMb.toFixed(0)} MB`,
      target: `< ${TARGET_RSS_MB} MB`,
      pass: rssMb < TARGET_RSS_MB,
    });
    console.log(`${rows.at(-1).scenario}: ${rows.at(-1).measured}`);
    saveResult('embedded', { runs: RUNS, results, rss_bytes_after_load: rss, rows });
  } finally {
    await embedded?.stop();
    baseline?.kill('SIGTERM');
    await db.drop();
    await rm(work, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
