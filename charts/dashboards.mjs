#!/usr/bin/env node
// Writes charts/lab/dashboards/<component>.json, one Grafana dashboard per entry of
// the chart's services (values.yaml), all from the one description below: the
// same rows for every component (requests, errors, latency, saturation, and the
// bus where it has one), each also per replica (by pod). The series are selected
// by the `component` label the chart's PodMonitor adds.
//
//   node charts/dashboards.mjs           write the files
//   node charts/dashboards.mjs --check   exit 1 when a file differs from what it would write
//
// Edit this script, not the JSON; the chart tests run --check.
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

const chart = join(dirname(fileURLToPath(import.meta.url)), 'lab');
const values = parse(readFileSync(join(chart, 'values.yaml'), 'utf8'));

const DS = { type: 'prometheus', uid: '${datasource}' };
const RATE = '$__rate_interval';

/** Label matchers of a component's series. */
const sel = (component, extra = '') => `namespace=~"$namespace",component="${component}"${extra ? `,${extra}` : ''}`;

function panel(title, unit, targets, description) {
  return {
    type: 'timeseries',
    title,
    ...(description ? { description } : {}),
    datasource: DS,
    fieldConfig: { defaults: { unit }, overrides: [] },
    options: { legend: { displayMode: 'table', placement: 'right', showLegend: true }, tooltip: { mode: 'multi' } },
    targets: targets.map(([expr, legendFormat], i) => ({ refId: String.fromCharCode(65 + i), expr, legendFormat })),
  };
}

const row = (title) => ({ type: 'row', title, collapsed: false, panels: [] });

/** The rows of one component: what it serves (HTTP for the gateway, gRPC otherwise), then what it uses. */
function rows(name, svc) {
  const s = (extra) => sel(name, extra);
  const http = svc.kind === 'http';
  const h = 'lab_http_request_duration_seconds';
  const g = 'lab_grpc_server_duration_seconds';
  const serverErr = 'code=~"2|4|13|14|15"';
  const out = [];

  out.push(row('Requests'));
  if (http) {
    out.push(panel('Requests by route', 'reqps', [[`sum by (method, route) (rate(${h}_count{${s()}}[${RATE}]))`, '{{method}} {{route}}']]));
    out.push(panel('Requests by pod', 'reqps', [[`sum by (pod) (rate(${h}_count{${s()}}[${RATE}]))`, '{{pod}}']]));
  } else {
    out.push(panel('Calls by method', 'reqps', [[`sum by (method) (rate(${g}_count{${s()}}[${RATE}]))`, '{{method}}']]));
    out.push(panel('Calls by pod', 'reqps', [[`sum by (pod) (rate(${g}_count{${s()}}[${RATE}]))`, '{{pod}}']]));
  }

  out.push(row('Errors'));
  if (http) {
    out.push(
      panel('5xx and 4xx share by route', 'percentunit', [
        [`sum by (route) (rate(${h}_count{${s('status=~"5.."')}}[${RATE}])) / sum by (route) (rate(${h}_count{${s()}}[${RATE}]))`, '5xx {{route}}'],
        [`sum by (route) (rate(${h}_count{${s('status=~"4.."')}}[${RATE}])) / sum by (route) (rate(${h}_count{${s()}}[${RATE}]))`, '4xx {{route}}'],
      ]),
    );
    out.push(panel('5xx by pod', 'reqps', [[`sum by (pod, status) (rate(${h}_count{${s('status=~"5.."')}}[${RATE}]))`, '{{pod}} {{status}}']]));
  } else {
    out.push(
      panel(
        'Server errors share by method',
        'percentunit',
        [
          [
            `sum by (method, code) (rate(${g}_count{${s(serverErr)}}[${RATE}])) / ignoring (code) group_left sum by (method) (rate(${g}_count{${s()}}[${RATE}]))`,
            '{{method}} code {{code}}',
          ],
        ],
        'UNKNOWN (2), DEADLINE_EXCEEDED (4), INTERNAL (13), UNAVAILABLE (14), DATA_LOSS (15)',
      ),
    );
    out.push(panel('Server errors by pod', 'reqps', [[`sum by (pod, code) (rate(${g}_count{${s(serverErr)}}[${RATE}]))`, '{{pod}} code {{code}}']]));
  }
  out.push(
    panel('Failed calls to peers by pod', 'reqps', [
      [`sum by (pod, peer, code) (rate(lab_upstream_failures_total{${s()}}[${RATE}]))`, '{{pod}} -> {{peer}} {{code}}'],
    ]),
  );

  out.push(row('Latency'));
  const [metric, by] = http ? [h, 'route'] : [g, 'method'];
  out.push(
    panel(`p50 / p99 by ${by}`, 's', [
      [`histogram_quantile(0.5, sum by (le, ${by}) (rate(${metric}_bucket{${s()}}[${RATE}])))`, `p50 {{${by}}}`],
      [`histogram_quantile(0.99, sum by (le, ${by}) (rate(${metric}_bucket{${s()}}[${RATE}])))`, `p99 {{${by}}}`],
    ]),
  );
  out.push(panel('p99 by pod', 's', [[`histogram_quantile(0.99, sum by (le, pod) (rate(${metric}_bucket{${s()}}[${RATE}])))`, '{{pod}}']]));

  out.push(row('Saturation'));
  out.push(
    panel('Event-loop delay by pod', 's', [
      [`max by (pod) (nodejs_eventloop_lag_p99_seconds{${s()}})`, 'p99 {{pod}}'],
      [`max by (pod) (nodejs_eventloop_lag_mean_seconds{${s()}})`, 'mean {{pod}}'],
    ]),
  );
  out.push(
    panel(
      'Database pool by pod',
      'short',
      [
        [`sum by (pod) (lab_db_pool_waiting{${s()}})`, 'waiting {{pod}}'],
        [`sum by (pod) (lab_db_pool_connections{${s('state="busy"')}})`, 'busy {{pod}}'],
        [`max by (pod) (lab_db_pool_connections{${s('state="max"')}})`, 'max {{pod}}'],
      ],
      'Queries waiting for a connection are the pool at its maximum',
    ),
  );
  out.push(panel('CPU by pod', 'percentunit', [[`sum by (pod) (rate(process_cpu_seconds_total{${s()}}[${RATE}]))`, '{{pod}}']]));
  out.push(panel('Resident memory by pod', 'bytes', [[`max by (pod) (process_resident_memory_bytes{${s()}})`, '{{pod}}']]));

  out.push(row('Bus and outbox'));
  out.push(
    panel('Outbox waiting rows and dead letters', 'short', [
      [`max by (service) (lab_outbox_pending{${s()}})`, 'waiting {{service}}'],
      [`max by (service) (lab_dead_letters{${s()}})`, 'dead letters {{service}}'],
    ]),
  );
  out.push(
    panel('Outbox published / failed by pod', 'ops', [
      [`sum by (pod) (rate(lab_outbox_published_total{${s()}}[${RATE}]))`, 'published {{pod}}'],
      [`sum by (pod) (rate(lab_outbox_publish_failures_total{${s()}}[${RATE}]))`, 'failed {{pod}}'],
    ]),
  );
  out.push(
    panel(
      'Consumer outcomes by queue',
      'ops',
      [[`sum by (queue, outcome) (rate(lab_bus_consumed_total{${s()}}[${RATE}]))`, '{{queue}} {{outcome}}']],
      'retry: a handler failed on the message itself; wait: an outage waited out',
    ),
  );
  out.push(panel('Consumer outcomes by pod', 'ops', [[`sum by (pod, outcome) (rate(lab_bus_consumed_total{${s()}}[${RATE}]))`, '{{pod}} {{outcome}}']]));
  if (http) {
    out.push(row('Edge'));
    out.push(
      panel('Rate limits and idempotency', 'ops', [
        [`sum by (pod) (rate(lab_rate_limit_rejections_total{${s()}}[${RATE}]))`, '429 {{pod}}'],
        [`sum by (pod) (rate(lab_idempotent_replays_total{${s()}}[${RATE}]))`, 'replays {{pod}}'],
        [`sum by (pod) (rate(lab_rate_limit_backend_errors_total{${s()}}[${RATE}]))`, 'rate-limit store errors {{pod}}'],
        [`sum by (pod, operation) (rate(lab_idempotency_store_errors_total{${s()}}[${RATE}]))`, 'idempotency {{operation}} errors {{pod}}'],
      ]),
    );
  }
  return out;
}

/** Lays the panels out two to a row of the grid (rows span it) and numbers them. */
function layout(panels) {
  let y = 0;
  let x = 0;
  return panels.map((p, i) => {
    if (p.type === 'row') {
      if (x) y += 8;
      x = 0;
      const placed = { id: i + 1, ...p, gridPos: { h: 1, w: 24, x: 0, y } };
      y += 1;
      return placed;
    }
    const placed = { id: i + 1, ...p, gridPos: { h: 8, w: 12, x, y } };
    if (x) y += 8;
    x = x ? 0 : 12;
    return placed;
  });
}

function dashboard(name, svc) {
  return {
    title: `Lab: ${name}`,
    uid: `lab-${name}`,
    description: `Requests, errors, latency and saturation of ${name}, in all and per replica. Generated by charts/dashboards.mjs.`,
    schemaVersion: 39,
    version: 1,
    editable: true,
    tags: ['lab', name],
    time: { from: 'now-1h', to: 'now' },
    refresh: '30s',
    links: [{ title: 'Overview', type: 'dashboards', tags: ['lab'], asDropdown: true }],
    templating: {
      list: [
        { name: 'datasource', type: 'datasource', query: 'prometheus', label: 'Data source' },
        {
          name: 'namespace',
          type: 'query',
          datasource: DS,
          query: `label_values(process_cpu_seconds_total{component="${name}"}, namespace)`,
          includeAll: true,
          allValue: '.*',
          multi: true,
          label: 'Namespace',
          refresh: 2,
        },
      ],
    },
    panels: layout(rows(name, svc)),
  };
}

const check = process.argv.includes('--check');
let stale = 0;
for (const [name, svc] of Object.entries(values.services)) {
  const file = join(chart, 'dashboards', `${name}.json`);
  const text = `${JSON.stringify(dashboard(name, svc), null, 2)}\n`;
  let current = '';
  try {
    current = readFileSync(file, 'utf8');
  } catch {
    /* not written yet */
  }
  if (current === text) continue;
  if (check) {
    console.error(`${file} is not what charts/dashboards.mjs writes: run node charts/dashboards.mjs`);
    stale++;
  } else writeFileSync(file, text);
}
process.exit(stale ? 1 : 0);
