// Where the read path's tail comes from: GET /v1/samples/{id} through the cluster
// at even rates (RATES, req/s, comma-separated; each BENCH_SECONDS, default 6) over
// 64 connections, printing latency percentiles and, for each run, when the requests
// slower than 30 ms were due (seconds since the run's start:latency ms). Stalls show
// as runs of slow requests due within a few ms of each other; BENCH_SLOW_HIST=1 also
// counts them per second of the run (a cold start shows in the first seconds). A development aid; with
// BENCH_NODE_FLAGS=--trace-gc BENCH_LOG_DIR=<dir> the services' GC pauses go to <dir>.
import { api, seedOrg, startCluster } from './cluster.mjs';
import { pacedLoad } from './paced.mjs';
import { load } from './load.mjs';
const cluster = await startCluster();
try {
  const { token } = await seedOrg(cluster.url, cluster.operatorToken);
  let id;
  for (let i = 0; i < 50; i++) id = (await api(cluster.url, 'POST', '/v1/samples', token, { name: `s${i}`, type: 'blood' })).data.id;
  // BENCH_WARMUP seconds of saturated load first, so V8 has tiered the path up
  if (Number(process.env.BENCH_WARMUP ?? 0) > 0) await load(`${cluster.url}/v1/samples/${id}`, { token, duration: Number(process.env.BENCH_WARMUP) });
  for (const rate of (process.env.RATES ?? '100,200,400').split(',').map(Number)) {
    const timeline = [];
    console.log('start', Date.now());
    const r = await pacedLoad(`${cluster.url}/v1/samples/${id}`, {
      rate,
      seconds: Number(process.env.BENCH_SECONDS ?? 6),
      connections: 64,
      headers: { authorization: `Bearer ${token}` },
      timeline,
    });
    console.log(rate, JSON.stringify(r));
    const slow = timeline.filter(([, l]) => l > 30).map(([t, l]) => `${(t / 1000).toFixed(2)}:${l.toFixed(0)}`);
    console.log('  slow:', slow.length, slow.slice(0, 60).join(' '));
    if (process.env.BENCH_SLOW_HIST)
      console.log(
        '  slow per second:',
        JSON.stringify(
          Object.entries(
            Object.groupBy(
              timeline.filter(([, l]) => l > 30),
              ([t]) => Math.floor(t / 1000),
            ),
          ).map(([s, xs]) => [Number(s), xs.length]),
        ),
      );
  }
} finally {
  await cluster.stop();
}
