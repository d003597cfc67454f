import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { helm } from '../src/helm';
import { chart, dashboardExprs, dashboardsFresh, MONITORING_ON, parsePromQL, render, root, rulesOf, type Rule } from './alert-rules';

const values = parse(readFileSync(join(chart, 'values.yaml'), 'utf8')) as Record<string, any>;
const enabled = Object.entries<any>(values.services)
  .filter(([, s]) => s.enabled)
  .map(([n]) => n)
  .sort();
const ops = readFileSync(join(root, 'docs', 'operations.md'), 'utf8');
/** GitHub's anchors of the runbook headings (#### <AlertName>): the name in lower case. */
const anchors = new Set([...ops.matchAll(/^#### (\S+)\s*$/gm)].map((m) => m[1]!.toLowerCase()));

describe('chart monitoring: PrometheusRule, PodMonitor, dashboards', () => {
  let docs: any[];
  let rules: Rule[];

  beforeAll(async () => {
    docs = await render();
    rules = rulesOf(docs);
  });

  it('helm lint --strict passes with all of it on', async () => {
    const lint = await helm(['lint', '--strict', chart, ...MONITORING_ON]);
    expect([lint.code, lint.stderr]).toEqual([0, '']);
  });

  it('renders nothing of it by default', async () => {
    const kinds = (await render([])).map((d) => `${d.kind}/${d.metadata.name}`);
    expect(kinds.filter((k) => /PrometheusRule|PodMonitor|dashboard/.test(k))).toEqual([]);
  });

  it('the PrometheusRule is well-formed: every rule has a severity, a summary, a description and a runbook in docs/operations.md', () => {
    const [rule] = docs.filter((d) => d.kind === 'PrometheusRule');
    expect(rule).toMatchObject({ apiVersion: 'monitoring.coreos.com/v1', metadata: { name: 'lab-alerts' } });
    expect(rules.length).toBeGreaterThan(10);
    for (const r of rules) {
      expect([r.alert, Object.keys(r).filter((k) => !['alert', 'expr', 'for', 'labels', 'annotations'].includes(k))]).toEqual([r.alert, []]);
      expect([r.alert, r.alert]).toEqual([r.alert, expect.stringMatching(/^Lab[A-Za-z0-9]+$/)]);
      expect([r.alert, r.labels.severity]).toEqual([r.alert, expect.stringMatching(/^(warning|critical)$/)]);
      expect([r.alert, r.annotations.summary, r.annotations.description]).toEqual([r.alert, expect.any(String), expect.any(String)]);
      if (r.for !== undefined) expect([r.alert, r.for]).toEqual([r.alert, expect.stringMatching(/^\d+[smh]$/)]);
      const url = new URL(r.annotations.runbook_url!);
      expect([r.alert, url.pathname.endsWith('/operations.md'), url.hash]).toEqual([r.alert, true, `#${r.alert.toLowerCase()}`]);
      expect([r.alert, anchors.has(r.alert.toLowerCase())]).toEqual([r.alert, true]);
    }
  });

  it('covers what an operator must hear of', () => {
    const names = new Set(rules.map((r) => r.alert));
    for (const a of [
      'LabHttp5xxRatioHigh',
      'LabHttpReadLatencyHigh',
      'LabOutboxBacklogGrowing',
      'LabDeadLetterQueueNotEmpty',
      'LabConsumerRetrying',
      'LabReplicasBelowMinimum',
      'LabIdempotencyStoreErrors',
      'LabRateLimitStoreErrors',
    ]) {
      expect([a, names.has(a)]).toEqual([a, true]);
    }
  });

  it("compares each component's available replicas with the chart's minimum", async () => {
    const below = rules.filter((r) => r.alert === 'LabReplicasBelowMinimum');
    const none = rules.filter((r) => r.alert === 'LabServiceWithoutReadyPods');
    expect(none.map((r) => r.labels.component).sort()).toEqual(enabled);
    for (const r of below) {
      const svc = values.services[r.labels.component!];
      const min = svc.autoscaling.enabled ? svc.autoscaling.minReplicas : svc.replicas;
      expect(r.expr).toBe(`kube_deployment_status_replicas_available{namespace="lab",deployment="lab-${r.labels.component}"} < ${min}`);
    }
    // audit runs one replica: "below 1" would be the no-ready-pod alert twice
    expect(below.map((r) => r.labels.component)).not.toContain('audit');
    expect(below.map((r) => r.labels.component)).toContain('notebook');
    // an autoscaled component's minimum is the autoscaler's
    const scaled = rulesOf(
      await render([
        '--set',
        'monitoring.prometheusRule.enabled=true',
        '--set',
        'services.notebook.autoscaling.enabled=true',
        '--set',
        'services.notebook.autoscaling.minReplicas=3',
      ]),
    );
    expect(scaled.find((r) => r.alert === 'LabReplicasBelowMinimum' && r.labels.component === 'notebook')?.expr).toMatch(/ < 3$/);
  });

  it('every alert expression parses as PromQL', () => {
    for (const r of rules) expect([r.alert, parsePromQL(r.expr).errors]).toEqual([r.alert, []]);
  });

  it('the grammar does find errors (the check above can fail)', () => {
    expect(parsePromQL('sum(rate(lab_bus_consumed_total[5m])').errors).not.toEqual([]);
    expect(parsePromQL('lab_outbox_pending{service=}').errors).not.toEqual([]);
    expect(parsePromQL('max by (queue) (x{queue=~`a\\.dlq`}) > 0').metrics).toEqual(['x']);
  });

  it('every dashboard expression parses as PromQL', () => {
    const exprs = dashboardExprs();
    expect(exprs.length).toBeGreaterThan(100);
    for (const { file, expr } of exprs) expect([file, expr, parsePromQL(expr).errors]).toEqual([file, expr, []]);
  });

  it('the PodMonitor scrapes the metrics port of every enabled component, each pod a target, with its component label', () => {
    const pm = docs.filter((d) => d.kind === 'PodMonitor');
    expect(pm).toHaveLength(1);
    expect(pm[0]).toMatchObject({
      apiVersion: 'monitoring.coreos.com/v1',
      metadata: { name: 'lab-metrics' },
      spec: {
        namespaceSelector: { matchNames: ['lab'] },
        selector: { matchLabels: { 'app.kubernetes.io/instance': 'lab' } },
        podMetricsEndpoints: [{ port: 'metrics', path: '/metrics', relabelings: [{ targetLabel: 'component' }] }],
      },
    });
    expect([...pm[0].spec.selector.matchExpressions[0].values].sort()).toEqual(enabled);
    // the port it names is the one every Deployment's container has
    for (const d of docs.filter((x) => x.kind === 'Deployment')) {
      const ports = d.spec.template.spec.containers[0].ports.map((p: { name: string }) => p.name);
      expect([d.metadata.name, ports]).toEqual([d.metadata.name, expect.arrayContaining(['metrics'])]);
      expect(pm[0].spec.selector.matchExpressions[0].values).toContain(d.spec.template.metadata.labels['app.kubernetes.io/component']);
    }
  });

  it('refuses a PodMonitor without a metrics port', async () => {
    await expect(render(['--set', 'monitoring.podMonitor.enabled=true', '--set', 'metrics.enabled=false'])).rejects.toThrow(/needs metrics.enabled/);
  });

  it('ships the overview and one dashboard per enabled component as sidecar ConfigMaps', async () => {
    const maps = docs.filter((d) => d.kind === 'ConfigMap' && /-dashboard-/.test(d.metadata.name));
    expect(maps.map((m) => m.metadata.name).sort()).toEqual(['lab', ...enabled].map((n) => `lab-dashboard-${n}`).sort());
    for (const m of maps) {
      expect(m.metadata.labels).toMatchObject({ grafana_dashboard: '1' });
      const [key, text] = Object.entries<string>(m.data)[0]!;
      expect(key).toMatch(/^lab-[a-z]+\.json$/);
      const dash = JSON.parse(text) as { uid: string; panels: unknown[] };
      expect(dash.panels.length).toBeGreaterThan(5);
    }
    // a component left out of the release has no dashboard
    const without = await render(['--set', 'monitoring.dashboards.enabled=true', '--set', 'services.orders.enabled=false']);
    expect(without.map((d) => d.metadata.name)).not.toContain('lab-dashboard-orders');
  });

  it('each component dashboard shows requests, errors, latency and saturation, by pod', () => {
    for (const name of enabled) {
      const dash = JSON.parse(readFileSync(join(chart, 'dashboards', `${name}.json`), 'utf8')) as {
        panels: { type: string; title: string; targets?: { expr: string }[] }[];
      };
      const rows = dash.panels.filter((p) => p.type === 'row').map((p) => p.title);
      expect([name, rows]).toEqual([name, expect.arrayContaining(['Requests', 'Errors', 'Latency', 'Saturation'])]);
      const exprs = dash.panels.flatMap((p) => p.targets ?? []).map((t) => t.expr);
      for (const m of ['nodejs_eventloop_lag_p99_seconds', 'lab_db_pool_waiting']) expect([name, exprs.some((e) => e.includes(m))]).toEqual([name, true]);
      expect([name, exprs.every((e) => e.includes(`component="${name}"`))]).toEqual([name, true]);
      expect(exprs.filter((e) => /by \(pod\b/.test(e)).length).toBeGreaterThanOrEqual(6);
    }
  });

  it('the component dashboards are what charts/dashboards.mjs writes', () => {
    const fresh = dashboardsFresh();
    expect(fresh).toEqual({ ok: true, output: '' });
  });
});
