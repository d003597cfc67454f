import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { helm } from '../src/helm';
import { chartValues, renderedObjects, type RenderedObject } from '../src/chart-values';

/**
 * The chart read as an operator installing it for the first time (helm renders,
 * the tests assert on the rendered objects): egress beyond the release (webhook
 * receivers, extra rules), probes on the ports the process serves whatever the
 * values, rollouts that drop nothing, the connection budget, no data volume, and
 * the conventions of a chart installed by others (global values as a subchart,
 * image registry and digest, pod settings, a ServiceAccount, one scrape path,
 * the notes, the README's values table).
 */

const root = join(__dirname, '..', '..');
const chart = join(root, 'charts', 'lab');
const production = join(chart, 'values-production.yaml');
const NS = 'lab-ns';

type Json = Record<string, any>;
type K8sObject = RenderedObject;

const defaults = chartValues();
const productionValues = chartValues([production]);

async function render(args: string[] = [], release = 'lab', dir = chart): Promise<K8sObject[]> {
  const r = await helm(['template', release, dir, '--namespace', NS, ...args]);
  if (r.code !== 0) throw new Error(`helm template ${args.join(' ')} failed: ${r.stderr}`);
  return renderedObjects(r.stdout);
}

async function renderFails(args: string[]): Promise<string> {
  const r = await helm(['template', 'lab', chart, '--namespace', NS, ...args]);
  expect([args.join(' '), r.code]).toEqual([args.join(' '), 1]);
  return r.stderr;
}

const byKind = (objs: K8sObject[], kind: string) => objs.filter((o) => o.kind === kind);
const named = (objs: K8sObject[], kind: string, name: string) => objs.find((o) => o.kind === kind && o.metadata.name === name);
const componentOf = (o: K8sObject) => o.metadata.labels?.['app.kubernetes.io/component'];
const container = (o: K8sObject) => (o.spec.template?.spec ?? o.spec).containers[0] as Json;
const envOf = (c: Json) => Object.fromEntries((c.env as Json[]).map((e) => [e.name as string, (e.value ?? e.valueFrom) as unknown]));
const enabledServices = (values: Json) => Object.entries<Json>(values.services).filter(([, s]) => s.enabled);
const policy = (objs: K8sObject[], name: string) => named(objs, 'NetworkPolicy', `lab-${name}`)!;
const ipRules = (p: K8sObject) => (p.spec.egress as Json[]).filter((r) => r.to?.some((t: Json) => t.ipBlock));

const PRIVATE_V4 = ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '100.64.0.0/10', '169.254.0.0/16', '127.0.0.0/8'];
const PRIVATE_V6 = ['fc00::/7', 'fe80::/10', '::1/128'];

/** The port a probe checks, as a number (a named port looked up in the container's ports). */
function probePort(probe: Json, c: Json): number {
  const p = probe.httpGet?.port ?? probe.grpc?.port ?? probe.tcpSocket?.port;
  if (typeof p === 'number') return p;
  return (c.ports as Json[]).find((x) => x.name === p)?.containerPort as number;
}

describe('charts/lab on day one', () => {
  let objects: K8sObject[];
  let prod: K8sObject[];

  beforeAll(async () => {
    [objects, prod] = await Promise.all([render(), render(['-f', production])]);
  });

  describe('egress beyond the release', () => {
    it('webhooks reach any public address on the receivers ports, the gateway on https (MCP client documents), the private ranges excepted; no other component does', () => {
      const publicPorts: Record<string, number[]> = { webhooks: [443, 80], gateway: [443] };
      for (const objs of [objects, prod]) {
        for (const [component, ports] of Object.entries(publicPorts)) {
          const rules = ipRules(policy(objs, component));
          expect(rules).toHaveLength(1);
          const rule = rules[0]!;
          expect(rule.ports).toEqual(ports.map((port) => ({ protocol: 'TCP', port })));
          const v4 = rule.to.find((t: Json) => t.ipBlock.cidr === '0.0.0.0/0').ipBlock;
          const v6 = rule.to.find((t: Json) => t.ipBlock.cidr === '::/0').ipBlock;
          expect(v4.except).toEqual(expect.arrayContaining(PRIVATE_V4));
          expect(v6.except).toEqual(expect.arrayContaining(PRIVATE_V6));
          expect((v4.except as string[]).filter((c) => c.includes(':'))).toEqual([]);
          expect((v6.except as string[]).filter((c) => !c.includes(':'))).toEqual([]);
        }
        for (const p of byKind(objs, 'NetworkPolicy').filter((x) => !(componentOf(x) in publicPorts)))
          expect([p.metadata.name, ipRules(p).filter((r) => r.to.some((t: Json) => t.ipBlock.cidr === '0.0.0.0/0'))]).toEqual([p.metadata.name, []]);
      }
    });

    it('the ports and ranges are values; publicEgress off takes the rule away', async () => {
      const [ports, off] = await Promise.all([
        render([
          '--set-json',
          'services.webhooks.networkPolicy.publicEgress.ports=[443,8443]',
          '--set-json',
          'networkPolicy.privateRanges=["10.0.0.0/8","fc00::/7"]',
        ]),
        render(['--set', 'services.webhooks.networkPolicy.publicEgress.enabled=false']),
      ]);
      const rule = ipRules(policy(ports, 'webhooks'))[0]!;
      expect(rule.ports.map((p: Json) => p.port)).toEqual([443, 8443]);
      expect(rule.to).toEqual([{ ipBlock: { cidr: '0.0.0.0/0', except: ['10.0.0.0/8'] } }, { ipBlock: { cidr: '::/0', except: ['fc00::/7'] } }]);
      expect(ipRules(policy(off, 'webhooks'))).toEqual([]);
    });

    it('extraEgress: the global rules on every component, a component own on it alone', async () => {
      const global = { to: [{ ipBlock: { cidr: '10.20.0.0/16' } }], ports: [{ protocol: 'TCP', port: 8443 }] };
      const own = { to: [{ namespaceSelector: { matchLabels: { name: 'mail' } } }], ports: [{ protocol: 'TCP', port: 587 }] };
      const objs = await render([
        '--set-json',
        `networkPolicy.extraEgress=${JSON.stringify([global])}`,
        '--set-json',
        `services.notifications.networkPolicy.extraEgress=${JSON.stringify([own])}`,
      ]);
      for (const [name] of enabledServices(defaults)) {
        const egress = policy(objs, name).spec.egress as Json[];
        expect([name, egress]).toEqual([name, expect.arrayContaining([global])]);
        if (name === 'notifications') expect(egress).toContainEqual(own);
        else expect([name, egress.filter((r) => r.ports?.some((p: Json) => p.port === 587))]).toEqual([name, []]);
      }
    });

    it('the schema refuses a misspelt extra egress rule', async () => {
      const wrong: [string[], RegExp][] = [
        [['--set-json', 'networkPolicy.extraEgress=[{"too":[{"ipBlock":{"cidr":"10.0.0.0/8"}}]}]'], /extraEgress/],
        [['--set-json', 'services.webhooks.networkPolicy.extraEgress=[{"to":[{"ipBlock":{"cidr":"everywhere"}}]}]'], /extraEgress|cidr/],
        [['--set-json', 'services.webhooks.networkPolicy.publicEgress={"enabled":true,"ports":[]}'], /ports/],
        [['--set-json', 'services.webhooks.networkPolicy.egress=[]'], /egress/],
      ];
      const results = await Promise.all(wrong.map(([args]) => helm(['lint', '--strict', chart, ...args])));
      results.forEach((r, i) => {
        expect([wrong[i]![0].join(' '), r.code]).toEqual([wrong[i]![0].join(' '), 1]);
        expect(r.stdout + r.stderr).toMatch(wrong[i]![1]);
      });
    });
  });

  describe('probes on the ports the process serves', () => {
    const checkProbes = (objs: K8sObject[]) => {
      const deployments = byKind(objs, 'Deployment');
      expect(deployments.length).toBeGreaterThan(0);
      for (const d of deployments) {
        const c = container(d);
        const env = envOf(c);
        const api = Number(env.PORT ?? env.GRPC_PORT);
        const ops = Number(env.METRICS_PORT);
        const declared = (c.ports as Json[]).map((p) => p.containerPort as number).sort();
        expect([d.metadata.name, declared]).toEqual([d.metadata.name, [api, ops].sort()]);
        expect([d.metadata.name, ops]).toEqual([d.metadata.name, expect.any(Number)]);
        expect(ops).toBeGreaterThan(0);
        for (const kind of ['startupProbe', 'livenessProbe']) expect([d.metadata.name, kind, probePort(c[kind], c)]).toEqual([d.metadata.name, kind, api]);
        expect([d.metadata.name, c.readinessProbe.httpGet]).toEqual([d.metadata.name, { path: '/readyz', port: ops }]);
        // a slow start (bus retries, database, migrations under their lock) gets 5 minutes before liveness counts
        expect(c.startupProbe.periodSeconds * c.startupProbe.failureThreshold).toBeGreaterThanOrEqual(300);
      }
    };

    it('every container: startup and liveness on the API port, readiness on the ops port, both declared', () => {
      checkProbes(objects);
      checkProbes(prod);
    });

    it('metrics.enabled=false: the ops port is still served and probed, only the scraping goes', async () => {
      const objs = await render(['--set', 'metrics.enabled=false']);
      checkProbes(objs);
      for (const d of byKind(objs, 'Deployment')) {
        expect(envOf(container(d)).METRICS_PORT).toBe(String(defaults.metrics.port));
        expect(Object.keys(d.spec.template.metadata.annotations).filter((k) => k.startsWith('prometheus.io/'))).toEqual([]);
      }
    });

    it('a changed port moves env, container port, every probe, the Services, the targets and the policies with it', async () => {
      const objs = await render(['--set', 'services.identity.port=50052', '--set', 'services.gateway.port=8081', '--set', 'metrics.port=9100']);
      checkProbes(objs);
      const identity = container(named(objs, 'Deployment', 'lab-identity')!);
      expect(envOf(identity).GRPC_PORT).toBe('50052');
      expect(identity.livenessProbe.grpc).toEqual({ port: 50052 });
      expect(identity.startupProbe.grpc).toEqual({ port: 50052 });
      expect(identity.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 9100 });
      const gateway = container(named(objs, 'Deployment', 'lab-gateway')!);
      expect(gateway.livenessProbe.httpGet).toEqual({ path: '/v1/health', port: 8081 });
      expect(named(objs, 'Service', 'lab-identity-grpc')!.spec.ports[0].port).toBe(50052);
      expect(named(objs, 'ConfigMap', 'lab-config')!.data.IDENTITY_ADDR).toMatch(/:50052$/);
      expect(policy(objs, 'identity').spec.ingress[0].ports).toEqual([{ protocol: 'TCP', port: 50052 }]);
      expect(policy(objs, 'identity').spec.ingress[1].ports).toEqual([{ protocol: 'TCP', port: 9100 }]);
      const gatewayEgress = (policy(objs, 'gateway').spec.egress as Json[]).find(
        (r) => r.to?.[0]?.podSelector?.matchLabels?.['app.kubernetes.io/component'] === 'identity',
      );
      expect(gatewayEgress!.ports).toEqual([{ protocol: 'TCP', port: 50052 }]);
    });

    it('a probe handler given in the values is kept as it is', async () => {
      const objs = await render(['--set-json', 'services.audit.probes.liveness={"tcpSocket":{"port":50051},"periodSeconds":20}']);
      expect(container(named(objs, 'Deployment', 'lab-audit')!).livenessProbe).toEqual({ tcpSocket: { port: 50051 }, periodSeconds: 20, failureThreshold: 3 });
    });
  });

  describe('rollouts that drop nothing', () => {
    it('RollingUpdate with maxUnavailable 0 and maxSurge 1, overridable per component', async () => {
      for (const d of [...byKind(objects, 'Deployment'), ...byKind(prod, 'Deployment')])
        expect([d.metadata.name, d.spec.strategy]).toEqual([d.metadata.name, { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } }]);
      const objs = await render(['--set', 'services.jobs.strategy.maxSurge=25%', '--set', 'strategy.maxSurge=2', '--set', 'database.maxConnections=200']);
      expect(named(objs, 'Deployment', 'lab-jobs')!.spec.strategy.rollingUpdate).toEqual({ maxUnavailable: 0, maxSurge: '25%' });
      expect(named(objs, 'Deployment', 'lab-notebook')!.spec.strategy.rollingUpdate).toEqual({ maxUnavailable: 0, maxSurge: 2 });
      // a strategy that can replace nothing is refused
      expect(await renderFails(['--set', 'services.audit.strategy.maxSurge=0%'])).toMatch(/services\.audit: strategy maxSurge and maxUnavailable are both 0/);
    });

    it('a preStop sleep (exec: the image has sleep; native on 1.30+) and a grace period longer than the whole stop', async () => {
      // the image's base has a shell and coreutils' sleep
      expect(readFileSync(join(root, 'docker', 'Dockerfile'), 'utf8')).toMatch(/^FROM node:\d+-bookworm-slim\s*$/m);
      for (const d of [...byKind(objects, 'Deployment'), ...byKind(prod, 'Deployment')]) {
        const c = container(d);
        expect([d.metadata.name, c.lifecycle]).toEqual([d.metadata.name, { preStop: { exec: { command: ['sleep', '5'] } } }]);
        // preStop 5 s + drain 8 s + calls 10 s + outbox flush 5 s
        expect(d.spec.template.spec.terminationGracePeriodSeconds).toBeGreaterThan(5 + 8 + 10 + 5);
      }
      const native = await render(['--set', 'lifecycle.preStopMode=native', '--set', 'lifecycle.preStopSleepSeconds=7']);
      for (const d of byKind(native, 'Deployment')) expect(container(d).lifecycle).toEqual({ preStop: { sleep: { seconds: 7 } } });
    });

    it('the chart refuses a grace period the stop does not fit in, naming the arithmetic', async () => {
      expect(await renderFails(['--set', 'terminationGracePeriodSeconds=20'])).toMatch(
        /terminationGracePeriodSeconds \(20\) must be longer than a stop of \w+: preStop 5 s \+ drain 8000 ms \+ calls 10000 ms \+ outbox flush 5000 ms = 28 s/,
      );
      // a longer outbox flush of one component counts too
      expect(await renderFails(['--set', 'services.orders.env.LAB_OUTBOX_STOP_FLUSH_MS=30000'])).toMatch(/stop of orders: .*outbox flush 30000 ms = 53 s/);
      await expect(render(['--set', 'services.orders.env.LAB_OUTBOX_STOP_FLUSH_MS=30000', '--set', 'terminationGracePeriodSeconds=60'])).resolves.toBeDefined();
    });

    it('a ConfigMap change rolls every pod (checksum annotation); Secrets are the operator own', async () => {
      const changed = await render(['--set', 'config.LOG_LEVEL=debug']);
      for (const d of byKind(objects, 'Deployment')) {
        const before = d.spec.template.metadata.annotations['checksum/config'];
        const after = named(changed, 'Deployment', d.metadata.name)!.spec.template.metadata.annotations['checksum/config'];
        expect(before).toMatch(/^[0-9a-f]{64}$/);
        expect([d.metadata.name, after === before]).toEqual([d.metadata.name, false]);
      }
      // the chart creates no Secret (so no checksum of one); its notes say to restart after changing one
      expect(byKind(objects, 'Secret')).toEqual([]);
    });
  });

  describe('the connection budget', () => {
    const budgetOf = (values: Json) =>
      enabledServices(values)
        .filter(([, s]) => s.database)
        .reduce((sum, [, s]) => {
          const pods = Number(s.autoscaling.enabled ? s.autoscaling.maxReplicas : s.replicas) + 1; // + maxSurge 1
          const pool = Number(s.databasePoolSize ?? values.database.poolSize);
          return sum + pods * pool + (values.migrations.enabled && s.migrate ? 1 : 0);
        }, 0);

    it('the default and the production values fit their budget, each pod told its pool', () => {
      expect(budgetOf(defaults)).toBeLessThanOrEqual(defaults.database.maxConnections);
      expect(budgetOf(productionValues)).toBeLessThanOrEqual(productionValues.database.maxConnections);
      for (const [objs, values] of [
        [objects, defaults],
        [prod, productionValues],
      ] as const) {
        for (const [name, s] of enabledServices(values).filter(([, x]) => x.database)) {
          const env = envOf(container(named(objs, 'Deployment', `lab-${name}`)!));
          expect([name, env.DATABASE_POOL_SIZE]).toEqual([name, String(s.databasePoolSize ?? values.database.poolSize)]);
        }
      }
    });

    it('over the budget the render fails with the arithmetic', async () => {
      const err = await renderFails(['--set', 'database.maxConnections=50']);
      const total = budgetOf(defaults);
      expect(err).toContain(`the release may open ${total}, over database.maxConnections (50)`);
      expect(err).toContain('gateway 3x2');
      expect(err).toContain('audit 2x2');
      expect(err).toContain('+ 11 migration Jobs x 1');
      // the HPA's maximum counts, not the replicas, and a component's own pool
      const hpa = await renderFails([
        '--set',
        'services.notebook.autoscaling.enabled=true',
        '--set',
        'services.notebook.autoscaling.maxReplicas=20',
        '--set',
        'services.notebook.databasePoolSize=5',
      ]);
      expect(hpa).toContain('notebook 21x5');
      await expect(render(['--set', 'services.notebook.databasePoolSize=5', '--set', 'database.maxConnections=200'])).resolves.toBeDefined();
    });

    it('DATABASE_PREPARED_STATEMENTS: true by default, false behind the production pooler, in the pods and the migration Jobs', () => {
      for (const [objs, expected] of [
        [objects, 'true'],
        [prod, 'false'],
      ] as const) {
        for (const o of [...byKind(objs, 'Deployment'), ...byKind(objs, 'Job')]) {
          const env = envOf(container(o));
          if ('DATABASE_URL' in env) expect([o.metadata.name, env.DATABASE_PREPARED_STATEMENTS]).toEqual([o.metadata.name, expected]);
        }
      }
      // production: the database URLs name the Pooler and its pods are what the policies open
      const text = readFileSync(production, 'utf8');
      expect(text).toMatch(/kind: Pooler/);
      expect(text).toMatch(/poolMode: transaction/);
      expect(productionValues.networkPolicy.dataStores.postgres.podSelector).toEqual({ matchLabels: { 'cnpg.io/poolerName': 'lab-pg-pooler-rw' } });
    });
  });

  describe('no data volume', () => {
    it('only the /tmp emptyDir, the processes data dir under it, a larger one for the jobs exports', () => {
      for (const objs of [objects, prod]) {
        for (const d of byKind(objs, 'Deployment')) {
          const spec = d.spec.template.spec;
          expect([d.metadata.name, spec.volumes]).toEqual([d.metadata.name, [{ name: 'tmp', emptyDir: { sizeLimit: expect.any(String) } }]]);
          expect(envOf(container(d)).LAB_DATA_DIR).toMatch(/^\/tmp\//);
        }
      }
      expect(named(objects, 'Deployment', 'lab-jobs')!.spec.template.spec.volumes[0].emptyDir.sizeLimit).toBe('2Gi');
      expect(named(objects, 'Deployment', 'lab-notebook')!.spec.template.spec.volumes[0].emptyDir.sizeLimit).toBe('64Mi');
    });
  });

  describe('operator conventions', () => {
    it('the image names a registry; global.imageRegistry replaces it, a digest pins it', async () => {
      for (const d of byKind(objects, 'Deployment')) expect(container(d).image).toBe('docker.io/lab-notebook-service:0.1.0');
      for (const d of byKind(prod, 'Deployment')) expect(container(d).image).toBe('registry.example.org/lab/lab-notebook-service:0.1.0');
      const digest = `sha256:${'ab'.repeat(32)}`;
      const objs = await render([
        '--set',
        'global.imageRegistry=mirror.corp:5000',
        '--set',
        `image.digest=${digest}`,
        '--set',
        'services.jobs.image.tag=0.2.0',
      ]);
      const images = [...byKind(objs, 'Deployment'), ...byKind(objs, 'Job'), ...byKind(objs, 'Pod')].map((o) => [
        o.metadata.name,
        container(o).image as string,
      ]);
      for (const [name, image] of images)
        expect([name, image]).toEqual([
          name,
          `mirror.corp:5000/lab-notebook-service:${name === 'lab-jobs' || name === 'lab-jobs-migrate' ? '0.2.0' : '0.1.0'}@${digest}`,
        ]);
    });

    it('pod settings apply to every component and a component may replace them', async () => {
      const objs = await render([
        '--set-json',
        'nodeSelector={"pool":"apps"}',
        '--set-json',
        'tolerations=[{"key":"dedicated","operator":"Equal","value":"lab","effect":"NoSchedule"}]',
        '--set-json',
        'affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"arch","operator":"In","values":["amd64"]}]}]}}}',
        '--set-json',
        'topologySpreadConstraints=[{"maxSkew":1,"topologyKey":"kubernetes.io/hostname","whenUnsatisfiable":"ScheduleAnyway"}]',
        '--set',
        'priorityClassName=lab-high',
        '--set-json',
        'podAnnotations={"team":"lab","prometheus.io/scrape":"false"}',
        '--set-json',
        'podLabels={"team":"lab","app.kubernetes.io/component":"spoofed"}',
        '--set-json',
        'services.jobs.nodeSelector={"pool":"batch"}',
        '--set',
        'services.jobs.priorityClassName=lab-low',
        '--set-json',
        'services.jobs.podLabels={"tier":"batch"}',
      ]);
      for (const d of byKind(objs, 'Deployment')) {
        const spec = d.spec.template.spec;
        const jobs = componentOf(d) === 'jobs';
        expect([d.metadata.name, spec.nodeSelector]).toEqual([d.metadata.name, jobs ? { pool: 'batch' } : { pool: 'apps' }]);
        expect(spec.priorityClassName).toBe(jobs ? 'lab-low' : 'lab-high');
        expect(spec.tolerations).toEqual([{ key: 'dedicated', operator: 'Equal', value: 'lab', effect: 'NoSchedule' }]);
        expect(spec.affinity.nodeAffinity).toBeDefined();
        // the spread is over the component's own pods
        expect(spec.topologySpreadConstraints).toEqual([
          {
            maxSkew: 1,
            topologyKey: 'kubernetes.io/hostname',
            whenUnsatisfiable: 'ScheduleAnyway',
            labelSelector: { matchLabels: d.spec.selector.matchLabels },
          },
        ]);
        const labels = d.spec.template.metadata.labels;
        // the chart's own labels win: the selector still matches
        expect(labels).toMatchObject({ ...d.spec.selector.matchLabels, team: 'lab', ...(jobs ? { tier: 'batch' } : {}) });
        expect(d.spec.template.metadata.annotations.team).toBe('lab');
      }
      const job = named(objs, 'Job', 'lab-jobs-migrate')!.spec.template.spec;
      expect([job.nodeSelector, job.priorityClassName, job.tolerations]).toEqual([{ pool: 'batch' }, 'lab-low', expect.any(Array)]);
      const test = byKind(objs, 'Pod')[0]!.spec;
      expect([test.nodeSelector, test.priorityClassName]).toEqual([{ pool: 'apps' }, 'lab-high']);
    });

    it('a ServiceAccount of the chart own, no token unless asked, made before the migration Jobs', async () => {
      const sa = byKind(objects, 'ServiceAccount');
      expect(sa.map((s) => s.metadata.name)).toEqual(['lab-sa']);
      expect(sa[0]!.automountServiceAccountToken).toBe(false);
      expect(sa[0]!.metadata.annotations).toMatchObject({ 'helm.sh/hook': 'pre-install,pre-upgrade' });
      const jobWeight = Number(byKind(objects, 'Job')[0]!.metadata.annotations!['helm.sh/hook-weight']);
      expect(Number(sa[0]!.metadata.annotations!['helm.sh/hook-weight'])).toBeLessThan(jobWeight);
      for (const o of [...byKind(objects, 'Deployment'), ...byKind(objects, 'Job'), ...byKind(objects, 'Pod')]) {
        const spec = o.spec.template?.spec ?? o.spec;
        expect([o.metadata.name, spec.serviceAccountName, spec.automountServiceAccountToken]).toEqual([o.metadata.name, 'lab-sa', false]);
      }
      const [existing, annotated] = await Promise.all([
        render(['--set', 'serviceAccount.create=false', '--set', 'serviceAccount.name=lab-runtime']),
        render([
          '--set-json',
          'serviceAccount.annotations={"iam.gke.io/gcp-service-account":"lab@p.iam.gserviceaccount.com"}',
          '--set',
          'serviceAccount.automountToken=true',
        ]),
      ]);
      expect(byKind(existing, 'ServiceAccount')).toEqual([]);
      for (const d of byKind(existing, 'Deployment')) expect(d.spec.template.spec.serviceAccountName).toBe('lab-runtime');
      expect(byKind(annotated, 'ServiceAccount')[0]!.metadata.annotations).toMatchObject({ 'iam.gke.io/gcp-service-account': 'lab@p.iam.gserviceaccount.com' });
      for (const d of byKind(annotated, 'Deployment')) expect(d.spec.template.spec.automountServiceAccountToken).toBe(true);
    });

    it('the migration Jobs and the helm test Pod have NetworkPolicies of their own, with only the egress they need', () => {
      for (const [objs, values] of [
        [objects, defaults],
        [prod, productionValues],
      ] as const) {
        const migrate = named(objs, 'NetworkPolicy', 'lab-migrate')!;
        // made before the Jobs, as a hook
        expect(migrate.metadata.annotations).toMatchObject({ 'helm.sh/hook': 'pre-install,pre-upgrade', 'helm.sh/hook-weight': '-10' });
        const selected = migrate.spec.podSelector.matchExpressions[0].values as string[];
        for (const j of byKind(objs, 'Job')) {
          const labels = j.spec.template.metadata.labels;
          expect([j.metadata.name, selected.includes(labels['app.kubernetes.io/component']), labels['app.kubernetes.io/instance']]).toEqual([
            j.metadata.name,
            true,
            'lab',
          ]);
        }
        expect(selected).toHaveLength(byKind(objs, 'Job').length);
        expect(migrate.spec.ingress).toEqual([]);
        const pg = values.networkPolicy.dataStores.postgres;
        expect(migrate.spec.egress[0].ports).toEqual([
          { protocol: 'UDP', port: 53 },
          { protocol: 'TCP', port: 53 },
        ]);
        expect(migrate.spec.egress.slice(1).map((r: Json) => r.ports)).toEqual([[{ protocol: 'TCP', port: pg.port }]]);

        const test = named(objs, 'NetworkPolicy', 'lab-smoke-test')!;
        const pod = byKind(objs, 'Pod')[0]!;
        expect(Object.entries<string>(test.spec.podSelector.matchLabels).every(([k, v]) => pod.metadata.labels![k] === v)).toBe(true);
        expect(test.spec.ingress).toEqual([]);
        const reached = (test.spec.egress as Json[])
          .slice(1)
          .map((r) => [r.to[0].podSelector.matchLabels['app.kubernetes.io/component'], r.ports.map((p: Json) => p.port)]);
        expect(reached.sort()).toEqual(
          enabledServices(values)
            .map(([n, s]) => [n, s.kind === 'http' ? [s.port, values.metrics.port] : [s.port]])
            .sort(),
        );
      }
    });

    it('networkPolicy.enabled=false renders no NetworkPolicy at all, hooks included', async () => {
      const objs = await render(['--set', 'networkPolicy.enabled=false']);
      expect(byKind(objs, 'NetworkPolicy')).toEqual([]);
      expect(byKind(objs, 'Job').length).toBeGreaterThan(0);
    });

    it('one scrape path: prometheus.io annotations, or the PodMonitor instead', async () => {
      for (const d of byKind(objects, 'Deployment'))
        expect(d.spec.template.metadata.annotations).toMatchObject({ 'prometheus.io/scrape': 'true', 'prometheus.io/port': String(defaults.metrics.port) });
      expect(byKind(objects, 'PodMonitor')).toEqual([]);
      const objs = await render(['--set', 'monitoring.podMonitor.enabled=true']);
      expect(byKind(objs, 'PodMonitor')).toHaveLength(1);
      for (const d of byKind(objs, 'Deployment'))
        expect(Object.keys(d.spec.template.metadata.annotations).filter((k) => k.startsWith('prometheus.io/'))).toEqual([]);
    });

    it('the notes say how to reach the gateway and where the operator token is', async () => {
      const notes = async (args: string[]) => {
        const r = await helm(['install', 'lab', chart, '--namespace', NS, '--dry-run=client', ...args]);
        expect([r.code, r.stderr]).toEqual([0, '']);
        return r.stdout.slice(r.stdout.indexOf('NOTES:'));
      };
      const [plain, ingress, refd] = await Promise.all([
        notes([]),
        notes(['--set', 'ingress.enabled=true', '--set', 'ingress.host=eln.example.com']),
        notes(['--set-json', 'secrets.refs={"LAB_OPERATOR_TOKEN":{"name":"ops-token","key":"token"}}']),
      ]);
      expect(plain).toContain(`kubectl -n ${NS} port-forward svc/lab-gateway 8080:8080`);
      expect(plain).toContain(`kubectl -n ${NS} get secret lab-secrets -o jsonpath='{.data.LAB_OPERATOR_TOKEN}' | base64 -d`);
      expect(ingress).toContain('http://eln.example.com');
      expect(refd).toContain(`get secret ops-token -o jsonpath='{.data.token}'`);
    });

    it('installs as a subchart of an umbrella chart, with global values', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'lab-umbrella-'));
      try {
        mkdirSync(join(dir, 'charts'));
        mkdirSync(join(dir, 'templates'));
        cpSync(chart, join(dir, 'charts', 'lab'), { recursive: true });
        writeFileSync(
          join(dir, 'Chart.yaml'),
          stringify({
            apiVersion: 'v2',
            name: 'platform',
            version: '1.0.0',
            dependencies: [{ name: 'lab', version: '>=0.0.0', repository: 'file://charts/lab' }],
          }),
        );
        writeFileSync(
          join(dir, 'values.yaml'),
          stringify({
            // another subchart's global key must not trip the lab's schema
            global: { imageRegistry: 'mirror.corp', imagePullSecrets: [{ name: 'corp-pull' }], storageClass: 'fast' },
            lab: { imagePullSecrets: [{ name: 'lab-pull' }], services: { audit: { enabled: false } } },
          }),
        );
        const lint = await helm(['lint', '--strict', dir]);
        expect([lint.code, lint.stderr]).toEqual([0, '']);
        const objs = await render([], 'platform', dir);
        const deployments = byKind(objs, 'Deployment');
        expect(deployments.map((d) => d.metadata.name)).toContain('platform-lab-gateway');
        expect(deployments.map((d) => d.metadata.name)).not.toContain('platform-lab-audit');
        for (const o of [...deployments, ...byKind(objs, 'Job'), ...byKind(objs, 'Pod')]) {
          const spec = o.spec.template?.spec ?? o.spec;
          expect([o.metadata.name, spec.containers[0].image]).toEqual([o.metadata.name, 'mirror.corp/lab-notebook-service:0.1.0']);
          expect([o.metadata.name, spec.imagePullSecrets]).toEqual([o.metadata.name, [{ name: 'corp-pull' }, { name: 'lab-pull' }]]);
        }
        // a typo under the subchart's values is still refused
        writeFileSync(join(dir, 'typo.yaml'), stringify({ lab: { nodeSelectr: { pool: 'x' } } }));
        const typo = await helm(['template', 'platform', dir, '-f', join(dir, 'typo.yaml')]);
        expect(typo.code).toBe(1);
        expect(typo.stderr).toMatch(/nodeSelectr/);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  });

  describe('charts/lab/README.md', () => {
    it('its values table is what charts/values-table.mjs generates from the schema', () => {
      const r = spawnSync(process.execPath, [join(root, 'charts', 'values-table.mjs'), '--print'], { cwd: root, encoding: 'utf8' });
      expect([r.status, r.stderr]).toEqual([0, '']);
      const readme = readFileSync(join(chart, 'README.md'), 'utf8');
      const table = /<!-- values-table:begin[^>]*-->\n\n([\s\S]*?)\n<!-- values-table:end -->/.exec(readme)?.[1];
      expect(table).toBe(r.stdout);
      // and the --check mode agrees
      const check = spawnSync(process.execPath, [join(root, 'charts', 'values-table.mjs'), '--check'], { cwd: root, encoding: 'utf8' });
      expect(check.status).toBe(0);
    });

    it('every top-level value of values.yaml is a row of the table', () => {
      const r = spawnSync(process.execPath, [join(root, 'charts', 'values-table.mjs'), '--print'], { cwd: root, encoding: 'utf8' });
      const keys = new Set([...r.stdout.matchAll(/^\| `([^`]+)`/gm)].map((m) => m[1]!.split('.')[0]));
      expect(Object.keys(defaults).filter((k) => !keys.has(k))).toEqual([]);
    });
  });
});
