// When the slow reads of a saturated GET /v1/samples/{id} happen: 64 connections on
// the cluster for BENCH_SECONDS (8) after a warm-up, RUNS (2) times, each answer's
// time and latency kept. Prints how many 50 ms windows hold the requests at or over
// the run's p99 (spread thin: the stack's own queueing; a few windows with all 64
// connections slow at once: something stalled every process), and when each burst
// of slow answers began, with the spacing between bursts (a fixed spacing names a
// periodic cause: this is how kdamond's 500 ms sampling was found, machine-stalls.mjs).
// A development aid, not a scenario.
import autocannon from 'autocannon';
import { api, seedOrg, startCluster } from './cluster.mjs';
import { describeMachine, watchMachine } from './machine-stalls.mjs';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 8);
const cluster = await startCluster(['identity', 'notebook', 'audit']);
try {
  const { token } = await seedOrg(cluster.url, cluster.operatorToken);
  const { id } = (await api(cluster.url, 'POST', '/v1/samples', token, { name: 'timeline', type: 'blood' })).data;
  let timeline = [];
  const run = (duration) =>
    new Promise((resolve, reject) =>
      autocannon(
        {
          url: `${cluster.url}/v1/samples/${id}`,
          connections: 64,
          duration,
          headers: { authorization: `Bearer ${token}` },
          setupClient: (client) => client.on('response', (_status, _bytes, ms) => timeline.push([performance.now(), ms])),
        },
        (err, r) => (err ? reject(err) : resolve(r)),
      ),
    );
  await run(10);
  for (let k = 0; k < Number(process.env.RUNS ?? 2); k++) {
    timeline = [];
    const watch = watchMachine();
    const r = await run(SECONDS);
    const machine = watch.stop();
    const sorted = timeline.map(([, ms]) => ms).sort((a, b) => a - b);
    const p99 = sorted[Math.floor(sorted.length * 0.99)];
    const t0 = timeline[0][0];
    const windows = new Map();
    for (const [t, ms] of timeline) if (ms >= p99) windows.set(Math.floor((t - t0) / 50), (windows.get(Math.floor((t - t0) / 50)) ?? 0) + 1);
    // a burst: slow windows with less than 100 ms between them
    const bursts = [];
    for (const w of [...windows.keys()].sort((a, b) => a - b)) {
      if (bursts.length && w - bursts.at(-1).last <= 2) bursts.at(-1).last = w;
      else bursts.push({ first: w, last: w });
    }
    const starts = bursts.map((b) => b.first * 50);
    console.log(`${r.requests.average.toFixed(0)} req/s  p50 ${r.latency.p50} ms  p99 ${r.latency.p99} ms  max ${r.latency.max} ms`);
    console.log(
      `  answers at or over p99 (${p99.toFixed(1)} ms): ${windows.size} of ${Math.ceil(SECONDS * 20)} windows of 50 ms; most in one window ${Math.max(...windows.values())}`,
    );
    // epoch ms of the first answer: to set beside stall-log.cjs's lines
    console.log(`  bursts begin at (ms after ${Math.round(performance.timeOrigin + t0)}): ${starts.join(', ')}`);
    console.log(
      `  spacing (ms): ${starts
        .slice(1)
        .map((s, i) => s - starts[i])
        .join(', ')}`,
    );
    console.log(`  ${describeMachine(machine)}`);
  }
} finally {
  await cluster.stop();
}
