// The cluster shape with the notebook scaled to two replicas: does a gateway's
// traffic reach both, and what does it do to throughput? One cluster, two
// gateways over the same processes: one given both notebook replicas as an
// `ipv4:` target (round_robin), the other only the first (the one-replica figure,
// measured in the same run, alternating, since this 2-core machine drifts). The
// share of each replica is read from its own /metrics.
import pg from 'pg';
import { api, seedOrg, startCluster } from './cluster.mjs';
import { CONNECTIONS, fmt, load, median, RUNS, WARMUP } from './load.mjs';
import { saveResult } from './results.mjs';

/** gRPC calls a process has served (every method), from its Prometheus text. */
async function grpcCalls(metricsUrl) {
  const text = await (await fetch(`${metricsUrl}/metrics`)).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith('lab_grpc_server_duration_seconds_count{'))
    .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}

async function main() {
  const cluster = await startCluster(['identity', 'notebook', 'audit'], {}, { replicas: { notebook: 2 } });
  try {
    const twoUrl = cluster.url;
    const oneUrl = await cluster.gateway({ NOTEBOOK_ADDR: cluster.replicaAddrs.notebook[0] });
    const { token } = await seedOrg(twoUrl, cluster.operatorToken);
    let sampleId;
    for (let i = 0; i < 200; i++) sampleId = (await api(twoUrl, 'POST', '/v1/samples', token, { name: `seed-${i}`, type: 'blood' })).data.id;
    const db = new pg.Client({ connectionString: cluster.db.url });
    await db.connect();
    await db.query('analyze');
    await db.end();

    const scenarios = [
      { name: 'GET /v1/samples/{id}', path: `/v1/samples/${sampleId}`, opts: {} },
      { name: 'POST /v1/samples + Idempotency-Key', path: '/v1/samples', opts: { method: 'POST', body: { name: 'bench', type: 'blood' }, idempotent: true } },
    ];
    const results = [];
    const rows = [];
    for (const s of scenarios) {
      if (WARMUP > 0) {
        await load(`${twoUrl}${s.path}`, { token, ...s.opts, duration: WARMUP });
        await load(`${oneUrl}${s.path}`, { token, ...s.opts, duration: WARMUP });
      }
      const one = [];
      const two = [];
      const shares = [];
      for (let r = 0; r < RUNS; r++) {
        const before = await Promise.all(cluster.metricsUrls.notebook.map(grpcCalls));
        two.push(await load(`${twoUrl}${s.path}`, { token, ...s.opts }));
        const after = await Promise.all(cluster.metricsUrls.notebook.map(grpcCalls));
        const served = after.map((n, i) => n - before[i]);
        const total = served.reduce((a, b) => a + b, 0);
        shares.push(Math.min(...served) / total);
        one.push(await load(`${oneUrl}${s.path}`, { token, ...s.opts }));
      }
      for (const x of [...one, ...two]) if (x.non2xx || x.errors) console.error(`  warning: a run had ${x.non2xx} non-2xx, ${x.errors} errors`);
      const ratio = two.map((x, i) => x.rps / one[i].rps);
      rows.push({
        scenario: `${s.name}, notebook x2 behind one gateway`,
        measured: `${fmt(two.map((x) => x.rps))} req/s vs one replica ${fmt(one.map((x) => x.rps))}: ratio ${fmt(ratio, 2)}; p99 ${fmt(two.map((x) => x.p99))} ms (one replica ${fmt(one.map((x) => x.p99))} ms); smaller replica's share of calls ${fmt(shares, 2)}`,
        target: 'each replica >= 0.25 of the calls',
        pass: median(shares) >= 0.25,
      });
      results.push({
        scenario: s.name,
        two_replicas_rps: two.map((x) => x.rps),
        one_replica_rps: one.map((x) => x.rps),
        two_replicas_p99_ms: two.map((x) => x.p99),
        one_replica_p99_ms: one.map((x) => x.p99),
        smaller_share: shares,
      });
      console.log(
        `${s.name.padEnd(38)} x2 ${fmt(two.map((x) => x.rps))} req/s  x1 ${fmt(one.map((x) => x.rps))} req/s  ratio ${fmt(ratio, 2)}  smaller share ${fmt(shares, 2)}`,
      );
    }
    saveResult('scale-out', { runs: RUNS, connections: CONNECTIONS, results, rows });
  } finally {
    await cluster.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
