import { createHmac, randomBytes, randomInt, randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import pg from 'pg';
import { deleteRunQueues } from '../src/queues';
import { describeWithServers } from '../src/servers';
import { waitFor } from '../src/waits';
import { startOtlpReceiver, type OtlpReceiver } from '../src/otlp-receiver';
import { ChartRelease, type External } from '../src/chart-run/release';
import { request } from './faults/support';
import { chartValues } from '../src/chart-values';

/**
 * The chart run the way a cluster runs it (testing/src/chart-run): every
 * rendered pod a process with its rendered environment, ports, probes, user and
 * read-only root, on an address of its own, its Service names resolving to the
 * ready pods; then one scenario that crosses every edge of the release (REST
 * writes and reads through every gRPC service, the bus, Redis, a webhook delivery
 * to a receiver outside the release, an inbound webhook, a job with an
 * artifact, a raw upload, OTLP export, the `helm test` pod). Every connection any
 * process made is judged against the rendered NetworkPolicies; a pod that fails,
 * is killed by a probe or never becomes Ready, or a connection a policy would
 * drop, fails the test. Once per configuration operators use.
 */

const NAMESPACE = 'lab';
const RELEASE = 'lab';
// outside the release: a webhook receiver on the public internet and a collector
const RECEIVER_HOST = 'hooks.receiver.example';
// addresses of this run's own (another run may hold port 80 and 4318 elsewhere on the loopback)
const runNet = `127.42.${randomInt(1, 250)}`;
const RECEIVER_IP = `${runNet}.80`;
const COLLECTOR_IP = `${runNet}.43`;

type Values = Record<string, any>; // chart values, read field by field

/** Where a data store sits for the policies: its selectors' labels, a CIDR's address, or anywhere. */
function storePeer(store: { port: number; cidrs?: string[]; namespaceSelector?: Values; podSelector?: Values }, fallbackIp: string): External['as'] {
  const nsLabels = store.namespaceSelector?.matchLabels as Record<string, string> | undefined;
  const podLabels = store.podSelector?.matchLabels as Record<string, string> | undefined;
  const ip = store.cidrs?.[0]?.replace(/\/\d+$/, '') ?? fallbackIp;
  if (!nsLabels && !podLabels) return { ip, port: store.port };
  return {
    ip,
    port: store.port,
    pod: { namespace: nsLabels?.['kubernetes.io/metadata.name'] ?? NAMESPACE, labels: podLabels ?? {}, namespaceLabels: nsLabels },
  };
}

interface Configuration {
  name: string;
  /** an older chart's folder (the negative cases); charts/lab unless given */
  chartDir?: string;
  /** how long its pods may take to be Ready */
  readyTimeoutMs?: number;
  files?: string[];
  set?: string[];
  /** pods per Deployment (the policies and probes are the same for every replica) */
  pods?: number;
  tracing?: boolean;
}

const CONFIGURATIONS: Configuration[] = [
  { name: 'default values', pods: 2 },
  { name: 'values-production.yaml', files: ['values-production.yaml'] },
  // the toggles operators use, two runs rather than one each: a run is a minute
  { name: 'metrics off, changed ports', set: ['metrics.enabled=false', 'services.identity.port=50052', 'services.gateway.port=8081', 'metrics.port=9500'] },
  {
    name: 'tracing, monitoring and autoscaling on',
    set: [
      'tracing.enabled=true',
      'monitoring.podMonitor.enabled=true',
      'monitoring.prometheusRule.enabled=true',
      'services.gateway.autoscaling.enabled=true',
      'services.notebook.autoscaling.enabled=true',
      'services.webhooks.autoscaling.enabled=true',
      // the HPAs' maxima open more connections than the default budget: the chart refuses to render without this
      'database.maxConnections=200',
    ],
    tracing: true,
  },
];

const admin = (url: string, token: string) => async (method: string, path: string, body?: unknown) => {
  const r = await request(url, method, path, { token, body });
  if (r.status >= 300 || r.status === 0) throw new Error(`${method} ${path} -> ${r.status} ${r.text} ${r.error ?? ''}`);
  return r.body?.data;
};

describeWithServers(['postgres', 'rabbitmq', 'redis'], 'the chart run as a cluster runs it', () => {
  jest.setTimeout(600_000);
  const base = new URL(process.env.DATABASE_URL ?? 'postgres://127.0.0.1:5432/test');
  const amqp = new URL(process.env.AMQP_URL ?? 'amqp://127.0.0.1:5672');
  const redis = new URL(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379');
  let receiver: Server;
  const deliveries: string[] = [];
  let otlp: OtlpReceiver;

  beforeAll(async () => {
    receiver = createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (d: string) => (body += d));
      req.on('end', () => {
        deliveries.push(body);
        res.end('ok');
      });
    });
    await new Promise<void>((resolve, reject) => {
      receiver.once('error', reject);
      receiver.listen(80, RECEIVER_IP, () => resolve());
    });
    otlp = await startOtlpReceiver({ host: COLLECTOR_IP, port: 4318 });
  });
  afterAll(async () => {
    receiver.closeAllConnections();
    await new Promise((r) => receiver.close(r));
    await otlp.close();
  });

  /** A release of `config` installed (hooks, then every Deployment), its gateway's URL, and its removal. */
  async function install(config: Configuration) {
    const v = chartValues(config.files, config.chartDir);
    const dbName = `lab_chart_${randomBytes(5).toString('hex')}`;
    const adminDb = new pg.Client({ connectionString: base.toString() });
    await adminDb.connect();
    await adminDb.query(`create database ${dbName}`);
    await adminDb.end();
    const db = new URL(base.toString());
    db.pathname = `/${dbName}`;
    const exchange = `lab.chart.${randomBytes(4).toString('hex')}`;
    const operatorToken = `op_${randomBytes(24).toString('hex')}`;
    const services = Object.keys(v.services as Values);
    // the Secret the chart reads, and any other a `secrets.refs` entry names, as an operator creates them
    const secretValues: Record<string, string> = {
      LAB_INTERNAL_SECRET: randomBytes(24).toString('hex'),
      LAB_OPERATOR_TOKEN: operatorToken,
      AMQP_URL: process.env.AMQP_URL!,
      REDIS_URL: process.env.REDIS_URL!,
      ...Object.fromEntries(services.map((s) => [`DATABASE_URL_${s.toUpperCase()}`, db.toString()])),
    };
    const secrets: Record<string, Record<string, string>> = { [(v.secrets as Values).name as string]: { ...secretValues } };
    for (const [key, ref] of Object.entries(((v.secrets as Values).refs ?? {}) as Record<string, { name: string; key: string }>)) {
      secrets[ref.name] = { ...secrets[ref.name], [ref.key]: secretValues[key]! };
    }
    const stores = (v.networkPolicy as Values).dataStores as Values;
    const externals: External[] = [
      { label: 'postgres', host: base.hostname, port: Number(base.port || 5432), as: storePeer(stores.postgres, '10.30.0.10') },
      { label: 'rabbitmq', host: amqp.hostname, port: Number(amqp.port || 5672), as: storePeer(stores.rabbitmq, '10.30.0.11') },
      { label: 'redis', host: redis.hostname, port: Number(redis.port || 6379), as: storePeer(stores.redis, '10.30.0.12') },
      // on the public internet, where a lab's receivers are
      { label: 'webhook receiver', host: RECEIVER_IP, port: 80, as: { ip: '198.51.100.80', port: 80 } },
      { label: 'OTLP collector', host: COLLECTOR_IP, port: 4318, as: storePeer((v.tracing as Values).collector, '10.30.0.13') },
    ];
    const collectorHost = new URL((v.tracing as Values).endpoint as string).hostname;
    const release = await ChartRelease.render({
      chartDir: config.chartDir,
      release: RELEASE,
      namespace: NAMESPACE,
      valuesFiles: config.files,
      set: config.set,
      setString: [
        // a short-lived release: its queues go when it does
        `config.LAB_EVENTS_EXCHANGE=${exchange}`,
        'config.LAB_BUS_QUEUE_EXPIRES_MS=600000',
        'config.LAB_BUS_QUEUE_TYPE=classic',
        // the receiver is on this machine's loopback (the policies see it public)
        'config.LAB_WEBHOOKS_ALLOW_PRIVATE_NETWORKS=true',
      ],
      secrets,
      externals,
      hosts: { [RECEIVER_HOST]: RECEIVER_IP, [collectorHost]: COLLECTOR_IP },
      maxPodsPerDeployment: config.pods ?? 1,
      readyTimeoutMs: config.readyTimeoutMs,
    });
    const hooks = await release.runHooks('pre-install');
    await release.startDeployments();
    const gateway = release.podsOf('gateway')[0]!;
    const port = gateway.container.ports!.find((p) => p.name === 'http')!.containerPort;
    return {
      release,
      hooks,
      services,
      operatorToken,
      url: `http://${gateway.ip}:${port}`,
      remove: async () => {
        await release.stop();
        const dropDb = new pg.Client({ connectionString: base.toString() });
        await dropDb.connect();
        await dropDb.query(`drop database if exists ${dbName} with (force)`);
        await dropDb.end();
        await deleteRunQueues(process.env.AMQP_URL!, exchange);
      },
    };
  }

  /** An organisation with every module, its admin's API key, and a subscription to the receiver. */
  async function seed(url: string, operatorToken: string, name: string) {
    const op = admin(url, operatorToken);
    const org = (
      await op('POST', '/admin/v1/orgs', {
        name: `chart ${name}`,
        modules: ['lab_equipment', 'analytics_qc', 'sample_intake'],
        rate_limit: { per_minute: 100000, per_hour: 1000000 },
      })
    ).id as string;
    const user = (await op('POST', '/admin/v1/users', { email: `chart-${randomUUID()}@example.org`, password: 'correct horse battery' })).id as string;
    await op('PUT', `/admin/v1/orgs/${org}/members/${user}`, { role: 'admin' });
    const key = (await op('POST', `/admin/v1/orgs/${org}/api-keys`, { name: 'chart', scopes: ['*'], user_id: user })).token as string;
    await op('POST', `/admin/v1/orgs/${org}/webhook-subscriptions`, { url: `http://${RECEIVER_HOST}/hook`, events: ['sample.created'] });
    return { op, org, key, api: admin(url, key) };
  }

  it.each(CONFIGURATIONS)('$name: every pod Ready, every edge crossed, no connection a policy drops', async (config) => {
    const installed = await install(config);
    const { release, hooks, services, operatorToken, url } = installed;
    try {
      await scenario().catch((err: unknown) => {
        throw new Error(`${(err as Error).message}\n--- the release ---\n${release.report()}`);
      });
    } finally {
      await installed.remove();
    }

    async function scenario(): Promise<void> {
      expect(hooks.flatMap((h) => h.problems)).toEqual([]);
      expect(release.problems()).toEqual([]);
      // identity: an organisation, a user, an API key; webhooks: a subscription to a receiver outside the release
      const { op, org, key, api } = await seed(url, operatorToken, config.name);
      // notebook, inventory (calls notebook and identity), equipment, orders, notifications, audit
      const sample = (await api('POST', '/v1/samples', { name: 'chart sample', type: 'blood' })).id as string;
      expect((await api('GET', `/v1/samples/${sample}`)).id).toBe(sample);
      const experiment = (await api('POST', '/v1/experiments', { title: 'chart experiment' })).id as string;
      await api('POST', '/v1/reagents', { name: 'Acetone' });
      await api('POST', '/v1/equipment', { name: 'balance' });
      await api('GET', '/v1/lab-results');
      await api('GET', '/v1/notifications');
      // telemetry: a device and a raw file
      const device = (await api('POST', '/v1/devices', { name: 'reader', identifier: `dev-${randomUUID()}` })).id as string;
      const form = new FormData();
      form.append('device_id', device);
      form.append('file', new Blob(['time,value\n0,1\n']), 'run.csv');
      const uploaded = await fetch(`${url}/v1/results/upload`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: form });
      expect([200, 201, 202]).toContain(uploaded.status);
      // jobs: an experiment's PDF, its artifact read back
      const job = (await api('POST', '/v1/jobs', { job_type: 'experiment_entry_pdf', input: { entry_id: experiment } })).id as string;
      await waitFor('the job to succeed', async () => ((await api('GET', `/v1/jobs/${job}`)).status === 'succeeded' ? true : undefined), {
        timeoutMs: 60_000,
        intervalMs: 250,
      });
      const artifact = await fetch(`${url}/v1/jobs/${job}/artifact`, { headers: { authorization: `Bearer ${key}` } });
      expect(artifact.status).toBe(200);
      expect((await artifact.arrayBuffer()).byteLength).toBeGreaterThan(0);
      // an inbound webhook, signed as its sender would
      const ep = await op('POST', `/admin/v1/orgs/${org}/inbound-endpoints`, { allowed_event_types: ['order.updated'] });
      const raw = JSON.stringify({ event_type: 'order.updated', occurred_at: new Date().toISOString(), external_id: `x-${randomUUID()}`, payload: { n: 1 } });
      const t = Math.floor(Date.now() / 1000);
      const inbound = await fetch(`${url}/functions/v1/inbound-webhook/${org}/${ep.slug}`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-service-signature': `t=${t},v1=${createHmac('sha256', ep.secret as string)
            .update(`${t}.`)
            .update(raw)
            .digest('hex')}`,
        },
        body: raw,
      });
      expect(inbound.status).toBeLessThan(300);
      await api('GET', '/v1/audit');
      // the bus carried the sample's event to the webhooks service, which delivered it
      await waitFor('the webhook delivery', () => deliveries.some((d) => d.includes(sample)), { timeoutMs: 60_000, intervalMs: 100 });
      if (config.tracing)
        await waitFor('spans at the collector', () => otlp.spans().some((s) => s.service === 'gateway'), { timeoutMs: 30_000, intervalMs: 100 });

      // `helm test`: the smoke check pod
      const tests = await release.runTestPods();
      expect(tests.map((p) => [p.name, p.problems, p.problems.length ? p.tail : ''])).toEqual(tests.map((p) => [p.name, [], '']));

      // every edge was crossed: each gRPC service reached, the stores, the receiver
      const seen = release.connections();
      const reached = new Set(seen.map((c) => c.to.replace(/-\d+$/, '')));
      for (const s of services.filter((s) => s !== 'gateway')) expect([...reached].some((r) => r.endsWith(`-${s}`))).toBe(true);
      for (const e of ['postgres', 'rabbitmq', 'redis', 'webhook receiver', ...(config.tracing ? ['OTLP collector'] : [])]) expect(reached).toContain(e);
      expect(release.problems()).toEqual([]);
    }
  });

  /** Chart 0.1.0 as it was (a fixture): the runner must fail it where a cluster would. */
  const oldChart = join(__dirname, 'fixtures', 'chart-0.1.0', 'lab');

  it('fails chart 0.1.0 on the webhook delivery its policy drops', async () => {
    const installed = await install({ name: '0.1.0', chartDir: oldChart });
    try {
      const { api } = await seed(installed.url, installed.operatorToken, '0.1.0');
      const sample = (await api('POST', '/v1/samples', { name: 'dropped', type: 'blood' })).id as string;
      // the runner records rather than blocks: the delivery arrives, and the verdict on it is "dropped"
      await waitFor('the webhook delivery', () => deliveries.some((d) => d.includes(sample)), { timeoutMs: 60_000, intervalMs: 100 });
      expect(installed.release.problems()).toContainEqual(expect.stringMatching(/^lab-webhooks-1 -> webhook receiver:80: egress dropped/));
    } finally {
      await installed.remove();
    }
  });

  it('fails chart 0.1.0 with metrics off (no pod ever Ready) and a changed port (identity killed by its liveness probe)', async () => {
    const installed = await install({
      name: '0.1.0 toggles',
      chartDir: oldChart,
      set: ['metrics.enabled=false', 'services.identity.port=50052'],
      readyTimeoutMs: 45_000,
    });
    try {
      const problems = installed.release.problems();
      expect(problems).toContainEqual(expect.stringMatching(/^lab-gateway-1: not Ready within 45000 ms \(last probe failure: readiness: GET \/readyz/));
      expect(problems).toContainEqual(expect.stringMatching(/^lab-identity-1: liveness probe failed 3 times in a row: grpc health on 50051/));
    } finally {
      await installed.remove();
    }
  });
});
