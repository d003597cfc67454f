// Which hop the slow reads are slow in: GET /v1/samples/{id} through the cluster at
// even rates (RATES, req/s, comma-separated; BENCH_SECONDS each, default 10) over 64
// connections, then the share of requests over 10, 25 and 50 ms as the client saw
// them, as the gateway measured them (lab_http_request_duration_seconds: from reading
// the request to the answer, the gRPC call included) and as the notebook measured its
// GetRecord (lab_grpc_server_duration_seconds). Client minus gateway is time waiting
// for the gateway to read the request; gateway minus notebook is the gateway's own.
// A development aid, not a scenario.
import { api, freePort, seedOrg, startCluster } from './cluster.mjs';
import { pacedLoad } from './paced.mjs';

/** Cumulative bucket counts of a histogram, summed over the series `keep` accepts. */
async function buckets(url, name, keep) {
  const out = {};
  for (const line of (await (await fetch(url)).text()).split('\n')) {
    if (!line.startsWith(`${name}_bucket`) || !keep(line)) continue;
    const le = /le="([^"]+)"/.exec(line)[1];
    out[le] = (out[le] ?? 0) + Number(line.split(' ').pop());
  }
  return out;
}

const notebookMetrics = await freePort();
const gatewayMetrics = await freePort();
const cluster = await startCluster(['identity', 'notebook', 'audit'], { notebook: { METRICS_PORT: String(notebookMetrics) } });
try {
  // a gateway of its own that serves its metrics
  const url = await cluster.gateway({ METRICS_PORT: String(gatewayMetrics) });
  const { token } = await seedOrg(url, cluster.operatorToken);
  let id;
  for (let i = 0; i < 50; i++) id = (await api(url, 'POST', '/v1/samples', token, { name: `s${i}`, type: 'blood' })).data.id;
  const load = (rate, seconds, timeline) =>
    pacedLoad(`${url}/v1/samples/${id}`, { rate, seconds, connections: 64, headers: { authorization: `Bearer ${token}` }, timeline });
  const read = () =>
    Promise.all([
      buckets(`http://127.0.0.1:${gatewayMetrics}/metrics`, 'lab_http_request_duration_seconds', (l) => l.includes('method="GET"')),
      buckets(`http://127.0.0.1:${notebookMetrics}/metrics`, 'lab_grpc_server_duration_seconds', (l) => l.includes('GetRecord')),
    ]);
  for (const rate of (process.env.RATES ?? '300,600').split(',').map(Number)) {
    await load(rate, 3); // warm-up, not counted
    const [g0, n0] = await read();
    const timeline = [];
    const r = await load(rate, Number(process.env.BENCH_SECONDS ?? 10), timeline);
    const [g1, n1] = await read();
    const over = (a, b, le) => {
      const total = b['+Inf'] - a['+Inf'];
      return `${((100 * (total - (b[le] - a[le]))) / total).toFixed(1)}%`;
    };
    const client = (ms) => `${((100 * timeline.filter(([, l]) => l > ms).length) / timeline.length).toFixed(1)}%`;
    console.log(rate, JSON.stringify(r));
    for (const le of ['0.01', '0.025', '0.05'])
      console.log(`  over ${Number(le) * 1000} ms: client ${client(Number(le) * 1000)}  gateway ${over(g0, g1, le)}  notebook ${over(n0, n1, le)}`);
  }
} finally {
  await cluster.stop();
}
