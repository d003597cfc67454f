// Garbage collection per process of the cluster while it serves GET /v1/samples/{id}:
// after BENCH_WARMUP seconds of saturated load, RATE req/s (default 600) paced over
// 64 connections for BENCH_SECONDS (default 10), then (BENCH_SATURATE=1) the same
// time saturated. For each phase and process: scavenges (count, mean pause, bytes
// promoted each), mark-compacts (count, mean and longest pause, and the mean of their
// clear.external_string_table phase), from V8's --trace-gc-nvp. A development aid for
// the read tail (docs/benchmarks.md, 2026-11-27 (afternoon)).
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { api, seedOrg, startCluster } from './cluster.mjs';
import { load, WARMUP } from './load.mjs';
import { pacedLoad } from './paced.mjs';

// read by cluster.mjs when it starts each process
const dir = mkdtempSync(join(tmpdir(), 'gc-split-'));
process.env.BENCH_LOG_DIR = dir;
process.env.BENCH_NODE_FLAGS = `${process.env.BENCH_NODE_FLAGS ?? ''} --trace-gc-nvp`;
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const PROCESSES = ['gateway', 'identity', 'notebook', 'audit'];

/** ms since each process started, as --trace-gc-nvp stamps its lines: the last line's stamp, per process */
const lastStamp = (label) => Math.max(0, ...gcLines(label).map((l) => l.t));
function gcLines(label) {
  return readFileSync(join(dir, `${label}.log`), 'utf8')
    .split('\n')
    .filter((l) => l.includes(' pause='))
    .map((l) => {
      const num = (k) => Number((l.match(new RegExp(` ${k}=([0-9.]+)`)) ?? [])[1] ?? 0);
      return {
        t: Number((l.match(/\s(\d+) ms: /) ?? [])[1]),
        kind: (l.match(/gc=(\w+)/) ?? [])[1],
        pause: num('pause'),
        promoted: num('promoted'),
        ext: num('clear.external_string_table'),
      };
    });
}
function summarise(label, from, to) {
  const ls = gcLines(label).filter((l) => l.t > from && l.t <= to);
  const s = ls.filter((l) => l.kind === 's');
  const mc = ls.filter((l) => l.kind === 'mc');
  const mean = (xs, f) => (xs.length ? xs.reduce((a, x) => a + f(x), 0) / xs.length : 0);
  return `${label.padEnd(9)} scavenges ${String(s.length).padStart(3)} pause ${mean(s, (x) => x.pause).toFixed(1)} ms promoted ${(mean(s, (x) => x.promoted) / 1e3).toFixed(0)} KB | mark-compacts ${mc.length} pause ${mean(mc, (x) => x.pause).toFixed(1)} (max ${Math.max(0, ...mc.map((x) => x.pause)).toFixed(1)}) ms, external string table ${mean(mc, (x) => x.ext).toFixed(1)} ms`;
}

const cluster = await startCluster();
try {
  const { token } = await seedOrg(cluster.url, cluster.operatorToken);
  const { id } = (await api(cluster.url, 'POST', '/v1/samples', token, { name: 's', type: 'blood' })).data;
  const url = `${cluster.url}/v1/samples/${id}`;
  await load(url, { token, duration: WARMUP });
  const phases = [
    [
      'paced',
      () => pacedLoad(url, { rate: Number(process.env.RATE ?? 600), seconds: SECONDS, connections: 64, headers: { authorization: `Bearer ${token}` } }),
    ],
  ];
  if (process.env.BENCH_SATURATE) phases.push(['saturated', () => load(url, { token, duration: SECONDS })]);
  for (const [name, run] of phases) {
    // wait for a GC line after the phase so its last second is in the logs
    const from = Object.fromEntries(PROCESSES.map((p) => [p, lastStamp(p)]));
    const r = await run();
    await new Promise((resolve) => setTimeout(resolve, 1500));
    console.log(`${name}: ${JSON.stringify({ p50: Math.round(r.p50 * 10) / 10, p99: Math.round(r.p99 * 10) / 10, rps: r.rps })}`);
    for (const p of PROCESSES) console.log(`  ${summarise(p, from[p], lastStamp(p))}`);
  }
} finally {
  await cluster.stop();
}
