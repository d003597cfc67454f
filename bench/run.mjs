// npm run bench: the full stack (cluster shape: one process per service, real
// PostgreSQL, RabbitMQ, Redis) against a baseline measured in the same run, since
// absolute figures on a shared 2-core machine drift. Prints a table of medians
// (min-max) over RUNS runs and writes bench/results/read-write.json.
import { startWithBaseline } from './cluster.mjs';
import { CONNECTIONS, DURATION, fmt, load, median, RUNS, WARMUP } from './load.mjs';
import { pacedLoad } from './paced.mjs';
import { describeMachine, watchMachine } from './machine-stalls.mjs';
import { saveResult } from './results.mjs';

async function main() {
  const { cluster, baseUrl, token, sampleId, stop } = await startWithBaseline();
  try {
    const scenarios = [
      { name: 'GET /v1/samples/{id}', path: `/v1/samples/${sampleId}`, opts: {}, minRatio: 0.6, maxP99: 25 },
      { name: 'GET /v1/samples (50)', path: '/v1/samples?limit=50', opts: {}, minRatio: 0.6 },
      {
        name: 'POST /v1/samples + Idempotency-Key',
        path: '/v1/samples',
        opts: { method: 'POST', body: { name: 'bench', type: 'blood' }, idempotent: true },
        minRatio: 0.5,
      },
    ];
    const results = [];
    const rows = [];
    // BENCH_ONLY=get,list,post runs a subset (development)
    const only = process.env.BENCH_ONLY?.split(',');
    const keys = ['get', 'list', 'post'];
    for (const [i, s] of scenarios.entries()) {
      if (only && !only.includes(keys[i])) continue;
      const stack = [];
      const base = [];
      if (WARMUP > 0) {
        await load(`${cluster.url}${s.path}`, { token, ...s.opts, duration: WARMUP });
        await load(`${baseUrl}${s.path.replace('?limit=50', '')}`, { token, ...s.opts, idempotent: false, duration: WARMUP });
      }
      const watch = watchMachine();
      for (let r = 0; r < RUNS; r++) {
        // alternate the order so drift hits both sides alike
        const a = await load(`${cluster.url}${s.path}`, { token, ...s.opts });
        const b = await load(`${baseUrl}${s.path.replace('?limit=50', '')}`, { token, ...s.opts, idempotent: false });
        stack.push(a);
        base.push(b);
        if (a.non2xx || a.errors) console.error(`  warning: stack run had ${a.non2xx} non-2xx, ${a.errors} errors`);
      }
      const machine = watch.stop();
      const ratio = stack.map((x, i) => x.rps / base[i].rps);
      const p99 = stack.map((x) => x.p99);
      const pass = median(ratio) >= s.minRatio && (s.maxP99 === undefined || median(p99) < s.maxP99);
      rows.push({
        scenario: s.name,
        measured: `${fmt(stack.map((x) => x.rps))} req/s vs baseline ${fmt(base.map((x) => x.rps))}: ratio ${fmt(ratio, 2)}; p99 ${fmt(p99)} ms (baseline ${fmt(base.map((x) => x.p99))} ms)`,
        target: `ratio >= ${s.minRatio.toFixed(2)}${s.maxP99 ? `, p99 < ${s.maxP99} ms at ${CONNECTIONS} connections` : ''}`,
        pass,
      });
      let paced;
      if (s.maxP99) {
        // At saturation every connection always has a request queued, so the mean
        // latency is connections / throughput whatever the code does (64 / 1,400
        // req/s = 46 ms): the p99 bound is then a bound on the machine. The same
        // 64 connections paced at half the stack's saturated rate show the
        // latency a request meets under load that leaves headroom, stack and
        // baseline alike.
        const rate = Math.round(median(stack.map((x) => x.rps)) / 2);
        const pacedStack = [];
        const pacedBase = [];
        const paceOpts = { rate, seconds: DURATION, connections: CONNECTIONS, headers: { authorization: `Bearer ${token}` } };
        for (let r = 0; r < RUNS; r++) {
          pacedStack.push(await pacedLoad(`${cluster.url}${s.path}`, paceOpts));
          pacedBase.push(await pacedLoad(`${baseUrl}${s.path}`, paceOpts));
        }
        const pacedP99 = pacedStack.map((x) => x.p99);
        paced = { rate, stack_p50_ms: pacedStack.map((x) => x.p50), stack_p99_ms: pacedP99, baseline_p99_ms: pacedBase.map((x) => x.p99) };
        rows.push({
          scenario: `${s.name}, ${CONNECTIONS} connections paced at ${rate} req/s`,
          measured: `p50 ${fmt(pacedStack.map((x) => x.p50))} ms, p99 ${fmt(pacedP99)} ms (baseline p99 ${fmt(pacedBase.map((x) => x.p99))} ms)`,
          target: `p99 < ${s.maxP99} ms (informational: the target is stated at saturation above)`,
          pass: null,
        });
        console.log(`${''.padEnd(38)} paced at ${rate} req/s: stack p99 ${fmt(pacedP99)} ms  baseline p99 ${fmt(pacedBase.map((x) => x.p99))} ms`);
      }
      results.push({
        scenario: s.name,
        pass,
        stack_rps: stack.map((x) => x.rps),
        baseline_rps: base.map((x) => x.rps),
        ratio,
        stack_p50_ms: stack.map((x) => x.p50),
        stack_p99_ms: stack.map((x) => x.p99),
        baseline_p99_ms: base.map((x) => x.p99),
        machine,
        paced,
      });
      console.log(
        `${s.name.padEnd(38)} stack ${fmt(stack.map((x) => x.rps))} req/s  baseline ${fmt(base.map((x) => x.rps))} req/s  ratio ${fmt(ratio, 2)}  stack p99 ${fmt(stack.map((x) => x.p99))} ms`,
      );
      console.log(`${''.padEnd(38)} ${describeMachine(machine)}`);
    }
    saveResult('read-write', { runs: RUNS, seconds: DURATION, connections: CONNECTIONS, results, rows });
  } finally {
    await stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
