import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import Ajv from 'ajv';
import { parse, parseAllDocuments } from 'yaml';
import { helm } from '../src/helm';

const root = join(__dirname, '..', '..');
const chart = join(root, 'charts', 'lab');
const read = (p: string) => readFileSync(join(chart, p), 'utf8');
const values = parse(read('values.yaml')) as Record<string, any>;
const schema = JSON.parse(read('values.schema.json')) as Record<string, unknown>;
// every template, tests/ included (paths relative to templates/)
const templates = (readdirSync(join(chart, 'templates'), { recursive: true }) as string[]).filter((f) => /\.(ya?ml|tpl)$/.test(f));

const validator = () => new Ajv({ allErrors: true, strict: false }).compile(schema);
const clone = <T>(x: T): T => JSON.parse(JSON.stringify(x)) as T;

function has(obj: unknown, path: string[]): boolean {
  let cur: unknown = obj;
  for (const p of path) {
    if (!cur || typeof cur !== 'object' || !(p in cur)) return false;
    cur = (cur as Record<string, unknown>)[p];
  }
  return true;
}

/**
 * Every `.Values.a.b` the templates read, and every `$svc.a.b` where `$svc` is the
 * value variable of a `range ... := .Values.services` loop (checked against each entry).
 */
function referencedPaths(): { values: string[][]; service: string[][] } {
  const values: string[][] = [];
  const service: string[][] = [];
  for (const f of templates) {
    const text = readFileSync(join(chart, 'templates', f), 'utf8');
    for (const m of text.matchAll(/\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)/g)) values.push(m[1]!.slice(1).split('.'));
    const loopVars = [...text.matchAll(/range\s+\$[A-Za-z_]+\s*,\s*(\$[A-Za-z_]+)\s*:=\s*\$?[A-Za-z_]*\.Values\.services\b/g)].map((m) => m[1]!);
    for (const v of new Set(loopVars)) {
      const re = new RegExp(`\\${v}((?:\\.[A-Za-z_][A-Za-z0-9_]*)+)`, 'g');
      for (const m of text.matchAll(re)) service.push(m[1]!.slice(1).split('.'));
    }
  }
  return { values, service };
}

describe('helm chart charts/lab', () => {
  it('Chart.yaml is a v2 application chart', () => {
    expect(parse(read('Chart.yaml'))).toMatchObject({ apiVersion: 'v2', name: 'lab', type: 'application', version: expect.any(String) });
  });

  it('values.yaml satisfies values.schema.json', () => {
    const validate = validator();
    expect(validate(values) ? [] : validate.errors).toEqual([]);
  });

  it('values-production.yaml, merged over values.yaml as helm does, satisfies it too', () => {
    const isMap = (x: unknown): x is Record<string, any> => !!x && typeof x === 'object' && !Array.isArray(x);
    const merge = (a: Record<string, any>, b: Record<string, any>): Record<string, any> =>
      Object.fromEntries(
        [...new Set([...Object.keys(a), ...Object.keys(b)])].map((k) => [k, isMap(a[k]) && isMap(b[k]) ? merge(a[k], b[k]) : k in b ? b[k] : a[k]]),
      );
    const validate = validator();
    const production = merge(values, parse(read('values-production.yaml')) as Record<string, any>);
    expect(validate(production) ? [] : validate.errors).toEqual([]);
  });

  it('the schema refuses values that break the rules (so the check above can fail)', () => {
    const validate = validator();
    const bad = (mutate: (v: any) => void) => {
      const v = clone(values);
      mutate(v);
      return validate(v);
    };
    expect(bad((v) => (v.containerSecurityContext.readOnlyRootFilesystem = false))).toBe(false);
    expect(bad((v) => (v.services.notebook.kind = 'http'))).toBe(false);
    expect(bad((v) => (v.services.identity.env = { DATABASE_URL: 'postgres://u:p@db/x' }))).toBe(false);
    expect(bad((v) => (v.services.identity.probes.liveness = {}))).toBe(false);
    expect(bad((v) => delete v.services.audit.autoscaling)).toBe(false);
    expect(bad((v) => (v.services.notebook.replicas = -1))).toBe(false);
    expect(bad((v) => (v.clusterDomain = 'Cluster_Local'))).toBe(false);
    expect(bad((v) => (v.fullnameOverride = 'Lab_Prod'))).toBe(false);
    expect(bad((v) => (v.nameOverride = 'x'.repeat(64)))).toBe(false);
    expect(bad((v) => (v.tests = { enabled: 'yes', timeoutSeconds: 60, resources: {} }))).toBe(false);
    expect(bad((v) => (v.secrets.refs = { AMQP_URL: { name: 'amqp' } }))).toBe(false);
    // no data volume: the chart takes none
    expect(bad((v) => (v.services.jobs.volumes = [{ name: 'artifacts', persistentVolumeClaim: { claimName: 'x' } }]))).toBe(false);
    expect(bad((v) => (v.services.jobs.env = { JOBS_ARTIFACT_DIR: '/var/lib/lab' }))).toBe(false);
    expect(bad((v) => (v.services.identity.env = { DATABASE_POOL_SIZE: '50' }))).toBe(false);
    expect(bad((v) => (v.services.identity.probes.liveness = { grpc: { port: 50051 }, httpGet: { path: '/', port: 1 } }))).toBe(false);
    expect(bad((v) => (v.services.identity.nodeSelectr = {}))).toBe(false);
    expect(bad((v) => (v.networkPolicy.extraEgress = [{ too: [] }]))).toBe(false);
    expect(bad((v) => (v.services.webhooks.networkPolicy.extraEgress = [{ to: [{ ipBlock: { cidr: 'any' } }] }]))).toBe(false);
    expect(bad((v) => (v.database.preparedStatements = 'false'))).toBe(false);
    expect(bad((v) => (v.serviceAccount.automount = false))).toBe(false);
    expect(bad((v) => (v.image.digest = 'latest'))).toBe(false);
  });

  it('defines every component of the cluster', () => {
    // every service package of the repository (standalone is all of them in one process)
    const packages = readdirSync(join(__dirname, '..', '..', 'services'), { withFileTypes: true })
      .filter((d) => d.isDirectory() && d.name !== 'standalone' && existsSync(join(__dirname, '..', '..', 'services', d.name, 'package.json')))
      .map((d) => d.name)
      .sort();
    expect(Object.keys(values.services).sort()).toEqual(packages);
    // the probes' timing only: the chart fills in what they check on the ports it renders (chart-day-one.unit.test.ts)
    const handlers = ['httpGet', 'grpc', 'tcpSocket', 'exec'];
    for (const [name, s] of Object.entries<any>(values.services)) {
      expect([name, Object.keys(s.probes).sort()]).toEqual([name, ['liveness', 'readiness', 'startup']]);
      for (const p of Object.values<Record<string, unknown>>(s.probes)) expect([name, Object.keys(p).filter((k) => handlers.includes(k))]).toEqual([name, []]);
    }
  });

  it('every .Values path the templates read exists in values.yaml', () => {
    const { values: paths, service } = referencedPaths();
    expect(paths.length).toBeGreaterThan(10);
    expect(service.length).toBeGreaterThan(10);
    expect(paths.filter((p) => !has(values, p)).map((p) => p.join('.'))).toEqual([]);
    for (const [name, entry] of Object.entries(values.services)) {
      expect([name, service.filter((p) => !has(entry, p)).map((p) => p.join('.'))]).toEqual([name, []]);
    }
  });

  it('the path check notices a missing value', () => {
    const { values: paths } = referencedPaths();
    const v = clone(values);
    delete v.metrics.port;
    expect(paths.some((p) => !has(v, p))).toBe(true);
  });

  it('templates never carry a secret value, only references', () => {
    for (const f of templates) {
      const text = readFileSync(join(chart, 'templates', f), 'utf8');
      expect([f, /postgres(ql)?:\/\/|amqps?:\/\/|redis:\/\//.test(text)]).toEqual([f, false]);
    }
  });

  it('a migration entry exists for every component whose hook is on', () => {
    for (const [name, s] of Object.entries<any>(values.services)) {
      if (!s.enabled || !s.database || !s.migrate) continue;
      expect([name, readdirSync(join(root, 'services', name, 'src')).includes('migrate.ts')]).toEqual([name, true]);
    }
  });

  it('docker/compose.yaml parses and runs every component as its own container', () => {
    const compose = parse(readFileSync(join(root, 'docker', 'compose.yaml'), 'utf8')) as { services: Record<string, any> };
    for (const s of ['postgres', 'rabbitmq', 'redis', 'gateway', 'identity', 'notebook', 'audit']) expect(Object.keys(compose.services)).toContain(s);
    // dns:/// targets: `--scale notebook=3` spreads calls over every container of the service
    const target = expect.stringMatching(/^dns:\/\/\/[a-z]+:\d+$/);
    expect(compose.services.gateway.environment).toMatchObject({ IDENTITY_ADDR: target, NOTEBOOK_ADDR: target, AUDIT_ADDR: target });
  });

  it('the Grafana dashboard parses and queries the lab metrics', () => {
    const dash = JSON.parse(read('dashboards/lab.json')) as { panels: { targets?: { expr: string }[] }[] };
    const exprs = dash.panels
      .flatMap((p) => p.targets ?? [])
      .map((t) => t.expr)
      .join('\n');
    for (const m of [
      'lab_http_request_duration_seconds',
      'lab_grpc_server_duration_seconds',
      'lab_outbox_backlog',
      'lab_bus_consumed_total',
      'lab_rate_limit_rejections_total',
      'lab_idempotent_replays_total',
    ]) {
      expect(exprs).toContain(m);
    }
  });

  // helm itself (the dev dependency's binary, ../src/helm.ts); chart-helm.unit.test.ts checks the rendered objects
  it('helm lint --strict and helm template render valid YAML', async () => {
    const lint = await helm(['lint', '--strict', chart]);
    expect([lint.code, lint.stderr]).toEqual([0, '']);
    const out = await helm(['template', 'lab', chart, '--set', 'ingress.enabled=true']);
    expect([out.code, out.stderr]).toEqual([0, '']);
    const docs = parseAllDocuments(out.stdout)
      .map((d) => d.toJS())
      .filter(Boolean);
    const kinds = docs.map((d: any) => d.kind);
    for (const k of ['Deployment', 'Service', 'NetworkPolicy', 'PodDisruptionBudget', 'Job', 'ConfigMap', 'Ingress', 'Pod']) expect(kinds).toContain(k);
  });
});

describe('docs/operations.md', () => {
  const ops = readFileSync(join(root, 'docs', 'operations.md'), 'utf8');
  const withDatabase = Object.entries(values.services as Record<string, { database?: boolean }>)
    .filter(([, s]) => s.database)
    .map(([name]) => name);

  it('its Secret example has the database URL of every component with a database, in the release namespace', () => {
    // `-n`: without it the Secret lands in the current context's namespace, not the release's
    const secret = /kubectl -n \S+ create secret generic lab-secrets([\s\S]*?)```/.exec(ops)![1]!;
    const keys = [...secret.matchAll(/--from-literal=(DATABASE_URL_[A-Z_]+)=/g)].map((m) => m[1]);
    expect(keys).toEqual(withDatabase.map((n) => `DATABASE_URL_${n.toUpperCase().replace(/-/g, '_')}`));
  });

  it('its backup list names every schema', () => {
    const list = /\(schemas: ([^)]*)\)/
      .exec(ops)![1]!
      .split(/,\s*/)
      .map((s) => s.trim());
    expect(list).toEqual(withDatabase);
  });
});
