import { startCluster, type Cluster } from '../src/cluster';
import { dashboardExprs, parsePromQL, render, rulesOf } from './alert-rules';
import { describeWithServers } from '../src/servers';

/**
 * The alerts and dashboards name only series that exist: every metric of their
 * expressions is in the /metrics of the running processes (the gateway and the
 * services as separate processes, as in the cluster), or is one of the few the
 * lab does not export and says so below.
 */

/** Series from outside the lab that the rules use on purpose. */
const EXTERNAL = new Set([
  // Prometheus's own: whether a scrape target answered
  'up',
  // kube-state-metrics: a Deployment's available replicas (LabReplicasBelowMinimum, LabServiceWithoutReadyPods)
  'kube_deployment_status_replicas_available',
  // RabbitMQ (rabbitmq_prometheus per-object metrics, or an exporter): a queue's depth (LabDeadLetterQueueNotEmpty)
  'rabbitmq_queue_messages',
]);

/** Metric names in a Prometheus text exposition: every family's (with a histogram's series) and every sample's. */
function exposedNames(text: string): Set<string> {
  const names = new Set<string>();
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)/.exec(line);
    if (type) {
      names.add(type[1]!);
      if (type[2] === 'histogram') for (const s of ['_bucket', '_sum', '_count']) names.add(`${type[1]}${s}`);
      if (type[2] === 'summary') for (const s of ['_sum', '_count']) names.add(`${type[1]}${s}`);
      continue;
    }
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]/.exec(line);
    if (sample) names.add(sample[1]!);
  }
  return names;
}

// the processes need PostgreSQL and RabbitMQ: without them the suite is skipped, visibly
const withBacking = (title: string, body: () => void) => describeWithServers(['postgres', 'rabbitmq'], title, body);

withBacking('alerts and dashboards against live /metrics', () => {
  jest.setTimeout(120_000);
  let cluster: Cluster | undefined;
  let exposed: Set<string>;
  const processes = ['gateway', 'identity', 'notebook', 'audit'];

  beforeAll(async () => {
    cluster = await startCluster({ services: ['identity', 'notebook', 'audit'] });
    exposed = new Set();
    for (const name of processes) {
      const res = await fetch(`${cluster.opsUrl(name)}/metrics`);
      expect([name, res.status]).toEqual([name, 200]);
      for (const n of exposedNames(await res.text())) exposed.add(n);
    }
  });

  afterAll(async () => {
    await cluster?.stop();
  });

  it('every process exports the series the rules need even before it saw any traffic', () => {
    for (const m of [
      'lab_outbox_pending',
      'lab_dead_letters',
      'lab_upstream_failures_total',
      'lab_db_pool_waiting',
      'lab_idempotency_store_errors_total',
      'lab_rate_limit_backend_errors_total',
    ]) {
      expect([m, exposed.has(m)]).toEqual([m, true]);
    }
  });

  it('every metric an alert names is exported by the services or listed as external', async () => {
    const rules = rulesOf(await render());
    const used = new Set(rules.flatMap((r) => parsePromQL(r.expr).metrics));
    expect(used.size).toBeGreaterThan(10);
    const missing = [...used].filter((m) => !exposed.has(m) && !EXTERNAL.has(m));
    expect(missing).toEqual([]);
    // the external list holds only what the rules use
    expect([...EXTERNAL].filter((m) => !used.has(m))).toEqual([]);
  });

  it('every metric a dashboard names is exported by the services', () => {
    const used = new Set(dashboardExprs().flatMap((e) => parsePromQL(e.expr).metrics));
    expect([...used].filter((m) => !exposed.has(m))).toEqual([]);
  });

  it('a name the services do not export is found (the check above can fail)', () => {
    expect(exposed.has('lab_http_request_duration_seconds_bucket')).toBe(true);
    expect(exposed.has('lab_http_requests_total')).toBe(false);
  });
});
