// Reads under a mixed load, as a LIMS sends them at peak hours: GET by id and keyed
// POST at once, each paced at an even rate over connections of its own (open loop:
// a request's latency counts from when it was due, bench/paced.mjs), against the
// cluster shape and the one-process baseline on the same PostgreSQL in the same run,
// alternated. The targets hold in every run: the full GET rate served, and GET and
// POST p99 each at most 1.5 times the baseline's in the same pair of runs.
// BENCH_MIXED_GET_RATE (1000), BENCH_MIXED_POST_RATE (400), BENCH_MIXED_SECONDS (45),
// BENCH_MIXED_CONNECTIONS (32 each), BENCH_RUNS (2 here unless set).
import { gatherStatistics, startWithBaseline } from './cluster.mjs';
import { fmt, median } from './load.mjs';
import { mixedLoad } from './paced.mjs';
import { describeMachine, watchBusy, watchMachine } from './machine-stalls.mjs';
import { saveResult } from './results.mjs';
import { describeWakeCost, measureWakeCost } from './wake-cost.mjs';

const GET_RATE = Number(process.env.BENCH_MIXED_GET_RATE ?? 1000);
const POST_RATE = Number(process.env.BENCH_MIXED_POST_RATE ?? 400);
const SECONDS = Number(process.env.BENCH_MIXED_SECONDS ?? 45);
const CONNECTIONS = Number(process.env.BENCH_MIXED_CONNECTIONS ?? 32);
const RUNS = Number(process.env.BENCH_RUNS ?? 2);
const WARMUP_SECONDS = Number(process.env.BENCH_WARMUP ?? 10);
/** A p99 at most this many times the baseline's, in the same pair of runs. */
const MAX_P99_RATIO = 1.5;
/** "The full rate": what a paced run may fall short by, counting the last in-flight answers. */
const SERVED_SHARE = 0.99;
/** A machine this busy through a run had no core to spare. */
const FULL_SHARE = 0.95;

/** Both loads at once against one base URL; resolves with the GET and POST figures. */
const mixed = (base, token, sampleId, seconds) =>
  mixedLoad(base, { token, sampleId, getRate: GET_RATE, postRate: POST_RATE, seconds, connections: CONNECTIONS });

/**
 * How much of the machine each side's runs took, and per request answered: the
 * whole machine's CPU (load generator included, alike for both sides). When the
 * stack's runs kept every core busy, its queue grew because the load asks more CPU
 * of the stack than this machine has, and that line says so.
 */
function describeBusy(runs) {
  const side = (name) => {
    const shares = runs.map((x) => x[name].busy.busy_share);
    if (shares.some((s) => s === null)) return `${name} not measured`;
    const perRequest = runs.map((x) => x[name].busy.busy_cpu_ms / ((x[name].get.served + x[name].post.served) * SECONDS));
    return `${name} ${shares.map((s) => (s * 100).toFixed(0)).join(' / ')}% (${perRequest.map((ms) => (ms * 1000).toFixed(0)).join(' / ')} us of CPU per request)`;
  };
  const cores = runs[0].stack.busy.cores;
  const full = runs.every((x) => x.stack.busy.busy_share !== null && x.stack.busy.busy_share >= FULL_SHARE);
  return (
    `machine busy (all ${cores} cores): ${side('stack')}; ${side('baseline')}` +
    (full ? `; the stack's runs kept every core busy: this load asks more CPU of it than the machine has` : '')
  );
}

async function main() {
  // before anything starts: what waking a process costs here explains most of the
  // distance between this scenario's figures on one machine and on another
  const wake = await measureWakeCost({ rate: GET_RATE });
  const { cluster, baseUrl, token, sampleId, stop } = await startWithBaseline();
  try {
    if (WARMUP_SECONDS > 0) {
      await mixed(cluster.url, token, sampleId, WARMUP_SECONDS);
      await mixed(baseUrl, token, sampleId, WARMUP_SECONDS);
    }
    // The warm-ups' keyed POSTs took the organisation from 200 samples to thousands
    // in seconds, far faster than autovacuum looks (once a minute). A LIMS at peak
    // hours works in an organisation whose statistics autovacuum gathered at its
    // size; without them the stack's prepared GET by id would keep the plan made
    // for 200 rows (a scan, whose cost grows with every sample the POSTs add),
    // while the baseline plans each statement anew (decision 067).
    await gatherStatistics(cluster.db.url);
    const runs = [];
    const watch = watchMachine();
    for (let r = 0; r < RUNS; r++) {
      // alternate the order so drift hits both sides alike
      const order = r % 2 === 0 ? ['stack', 'baseline'] : ['baseline', 'stack'];
      const pair = {};
      for (const side of order) {
        const busy = watchBusy();
        pair[side] = await mixed(side === 'stack' ? cluster.url : baseUrl, token, sampleId, SECONDS);
        pair[side].busy = busy.stop();
      }
      runs.push(pair);
      const { stack, baseline: base } = pair;
      console.log(
        `run ${r + 1}: stack GET ${stack.get.served.toFixed(0)}/s p50 ${stack.get.p50.toFixed(1)} p99 ${stack.get.p99.toFixed(1)} ms, POST p99 ${stack.post.p99.toFixed(1)} ms; ` +
          `baseline GET p50 ${base.get.p50.toFixed(1)} p99 ${base.get.p99.toFixed(1)} ms, POST p99 ${base.post.p99.toFixed(1)} ms`,
      );
    }
    const machine = watch.stop();
    const served = runs.map((x) => x.stack.get.served);
    const getRatio = runs.map((x) => x.stack.get.p99 / x.baseline.get.p99);
    const postRatio = runs.map((x) => x.stack.post.p99 / x.baseline.post.p99);
    const failures = runs.map((x) => x.stack.get.errors + x.stack.get.non2xx + x.stack.post.errors + x.stack.post.non2xx);
    // every run, not the median: the tail is what varies from run to run
    const pass = runs.every(
      (_, i) => served[i] >= GET_RATE * SERVED_SHARE && getRatio[i] <= MAX_P99_RATIO && postRatio[i] <= MAX_P99_RATIO && failures[i] === 0,
    );
    const ms = (xs) => xs.map((x) => x.toFixed(0)).join(' / ');
    const rows = [
      {
        scenario: `Mixed: ${GET_RATE} GET by id/s + ${POST_RATE} keyed POST/s paced, ${CONNECTIONS} connections each, ${SECONDS} s (${RUNS} runs)`,
        measured:
          `GET served ${ms(served)}/s, p50 ${ms(runs.map((x) => x.stack.get.p50))} ms, p99 ${ms(runs.map((x) => x.stack.get.p99))} ms ` +
          `(baseline ${ms(runs.map((x) => x.baseline.get.p99))}; ratio ${getRatio.map((x) => x.toFixed(2)).join(' / ')}); ` +
          `POST p99 ${ms(runs.map((x) => x.stack.post.p99))} ms (baseline ${ms(runs.map((x) => x.baseline.post.p99))}; ratio ${postRatio.map((x) => x.toFixed(2)).join(' / ')})`,
        target: `every run: GET >= ${GET_RATE * SERVED_SHARE}/s served, GET and POST p99 <= ${MAX_P99_RATIO}x the baseline's, no failed request`,
        pass,
      },
    ];
    console.log(`${rows[0].scenario}\n  ${rows[0].measured}\n  ${describeBusy(runs)}\n  ${describeMachine(machine)}\n  ${describeWakeCost(wake)}`);
    console.log(`  median GET p99 ratio ${fmt(getRatio, 2)}, POST p99 ratio ${fmt(postRatio, 2)}; median served ${median(served).toFixed(0)}/s`);
    saveResult('mixed', { runs, get_rate: GET_RATE, post_rate: POST_RATE, seconds: SECONDS, connections: CONNECTIONS, machine, wake, rows });
  } finally {
    await stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
