import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parser } from '@prometheus-io/lezer-promql';
import { parseAllDocuments } from 'yaml';
import { helm } from '../src/helm';

/**
 * The chart's monitoring objects as the tests see them: rendered by helm with
 * alerts, monitor and dashboards on, and every PromQL expression they hold parsed
 * with the Prometheus project's own grammar.
 */

export const root = join(__dirname, '..', '..');
export const chart = join(root, 'charts', 'lab');

export const MONITORING_ON = [
  '--set',
  'monitoring.prometheusRule.enabled=true',
  '--set',
  'monitoring.podMonitor.enabled=true',
  '--set',
  'monitoring.dashboards.enabled=true',
];

export async function render(args: string[] = MONITORING_ON): Promise<any[]> {
  const out = await helm(['template', 'lab', chart, '--namespace', 'lab', ...args]);
  if (out.code !== 0) throw new Error(`helm template failed: ${out.stderr}`);
  return parseAllDocuments(out.stdout)
    .map((d) => d.toJS())
    .filter(Boolean);
}

export interface Rule {
  alert: string;
  expr: string;
  for?: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

export const rulesOf = (docs: any[]): Rule[] =>
  docs.filter((d) => d.kind === 'PrometheusRule').flatMap((d) => d.spec.groups.flatMap((g: { rules: Rule[] }) => g.rules));

/** PromQL of the dashboards, with Grafana's variables replaced by what Prometheus would get. */
export function dashboardExprs(): { file: string; expr: string }[] {
  const dir = join(chart, 'dashboards');
  return readdirSync(dir)
    .filter((f) => f.endsWith('.json'))
    .flatMap((file) => {
      const dash = JSON.parse(readFileSync(join(dir, file), 'utf8')) as { panels: { targets?: { expr: string }[] }[] };
      return dash.panels
        .flatMap((p) => p.targets ?? [])
        .map((t) => ({ file, expr: t.expr.replaceAll('$__rate_interval', '5m').replaceAll('$namespace', '.*') }));
    });
}

export interface Parsed {
  /** text around each error node of the parse; empty when the expression is valid */
  errors: string[];
  /** metric names of its vector selectors */
  metrics: string[];
}

/** Parses one expression; any error node of the tree counts as a failure. */
export function parsePromQL(expr: string): Parsed {
  const tree = parser.parse(expr);
  const errors: string[] = [];
  const metrics = new Set<string>();
  tree.iterate({
    enter(node) {
      if (node.type.isError) errors.push(`at ${node.from}: ...${expr.slice(Math.max(0, node.from - 20), node.to + 20)}...`);
      if (node.name === 'Identifier' && node.node.parent?.name === 'VectorSelector') metrics.add(expr.slice(node.from, node.to));
    },
  });
  return { errors, metrics: [...metrics] };
}

/** Whether the per-component dashboards are what charts/dashboards.mjs writes. */
export function dashboardsFresh(): { ok: boolean; output: string } {
  try {
    execFileSync(process.execPath, [join(root, 'charts', 'dashboards.mjs'), '--check'], { encoding: 'utf8', stdio: 'pipe' });
    return { ok: true, output: '' };
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    return { ok: false, output: e.stderr || e.message };
  }
}
