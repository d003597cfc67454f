import { spawn, spawnSync } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { startCluster, type Cluster } from '../src/cluster';
import { SPAN_KIND, startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../src/otlp-receiver';
import { eventually, query, request, seedOrg } from './faults/support';
import { describeWithServers } from '../src/servers';

/**
 * Tracing in the cluster shape (separate service processes, RabbitMQ between
 * them), exported over OTLP/HTTP to a receiver of the test's own: one keyed
 * write is one trace from the gateway through gRPC, PostgreSQL, the outbox and
 * the broker to the audit consumer and the outbound webhook. And with tracing
 * off, nothing is exported and log lines carry no trace fields.
 */

const root = join(__dirname, '..', '..');
const describeCluster = (title: string, body: () => void) => describeWithServers(['postgres', 'rabbitmq'], title, body);

/** Each service's environment: `env` for every process, webhooks allowed to reach the loopback receiver. */
const everyProcess = (services: string[], env: Record<string, string>) =>
  Object.fromEntries([...services, 'gateway'].map((s) => [s, s === 'webhooks' ? { ...env, LAB_WEBHOOKS_ALLOW_PRIVATE_NETWORKS: 'true' } : env]));

/** Walks up from a span to the root, by parent ids; the chain of spans, the span first. */
function ancestry(span: ReceivedSpan, spans: ReceivedSpan[]): ReceivedSpan[] {
  const byId = new Map(spans.map((s) => [s.spanId, s]));
  const chain = [span];
  for (let s = span; s.parentSpanId;) {
    const parent = byId.get(s.parentSpanId);
    if (!parent) break;
    chain.push(parent);
    s = parent;
  }
  return chain;
}

/** Every span's parent is in the trace too (only the root has none). */
const parentsPresent = (spans: ReceivedSpan[]) => {
  const ids = new Set(spans.map((s) => s.spanId));
  return spans.every((s) => !s.parentSpanId || ids.has(s.parentSpanId));
};

const isPostgres = (s: ReceivedSpan) => s.kind === SPAN_KIND.client && (s.attributes['db.system.name'] ?? s.attributes['db.system']) === 'postgresql';

/** The event type a publish span names (the RabbitMQ instrumentation's attribute) */
const ROUTING_KEY = 'messaging.rabbitmq.routing_key';

const isHttpPost = (s: ReceivedSpan) => (s.attributes['http.request.method'] ?? s.attributes['http.method']) === 'POST';

/** Runs a script with node in the repository root; its exit status and output. */
function runNode(script: string, env: NodeJS.ProcessEnv): Promise<{ status: number | null; stdout: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['-e', script], { cwd: root, env, stdio: ['ignore', 'pipe', 'inherit'] });
    let stdout = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.once('error', reject);
    child.once('close', (status) => resolve({ status, stdout }));
  });
}

/** Log lines of a process's output that are JSON. */
const jsonLines = (output: string) =>
  output
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => {
      try {
        return JSON.parse(l) as Record<string, unknown>;
      } catch {
        return undefined;
      }
    })
    .filter((l): l is Record<string, unknown> => l !== undefined);

describeCluster('tracing across the cluster', () => {
  jest.setTimeout(150_000);
  const services = ['identity', 'notebook', 'audit', 'webhooks'];
  let otlp: OtlpReceiver;
  let cluster: Cluster | undefined;
  let hooks: Server | undefined;
  const deliveries: { sampleId: string; traceparent: string | undefined }[] = [];
  let token: string;

  beforeAll(async () => {
    otlp = await startOtlpReceiver();
    hooks = createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (d: string) => (body += d));
      req.on('end', () => {
        const traceparent = req.headers.traceparent;
        deliveries.push({
          sampleId: (JSON.parse(body) as { data: { id: string } }).data.id,
          traceparent: typeof traceparent === 'string' ? traceparent : undefined,
        });
        res.end('ok');
      });
    });
    await new Promise<void>((r) => hooks!.listen(0, '127.0.0.1', () => r()));
    cluster = await startCluster({
      services,
      // spans leave each process within a fifth of a second, not the default five
      serviceEnv: everyProcess(services, { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint, OTEL_BSP_SCHEDULE_DELAY: '200' }),
    });
    const seeded = await seedOrg(cluster);
    token = seeded.token;
    const sub = await request(cluster.url, 'POST', `/admin/v1/orgs/${seeded.orgId}/webhook-subscriptions`, {
      token: cluster.operatorToken,
      body: { url: `http://127.0.0.1:${(hooks.address() as AddressInfo).port}/hook`, events: ['sample.created'] },
    });
    expect(sub.status).toBe(201);
  });

  afterAll(async () => {
    await cluster?.stop();
    hooks?.closeAllConnections();
    await new Promise((r) => (hooks ? hooks.close(r) : r(undefined)));
    await otlp?.close();
  });

  let sampleId: string;
  let traceId: string;

  it('makes one keyed POST /v1/samples one trace: gateway, notebook over gRPC, PostgreSQL, the audit consumer', async () => {
    const created = await request(cluster!.url, 'POST', '/v1/samples', {
      token,
      body: { name: 'traced sample', type: 'tracing' },
      headers: { 'Idempotency-Key': `trace-${randomUUID()}` },
    });
    expect(created.status).toBe(201);
    sampleId = created.body.data.id;

    // the request's root: the gateway's server span, named after the route
    const gatewaySpan = await eventually(
      'the gateway server span of the POST',
      async () => otlp.spans().find((s) => s.service === 'gateway' && s.kind === SPAN_KIND.server && s.name === 'POST /v1/samples'),
      30_000,
    );
    traceId = gatewaySpan.traceId;
    expect(gatewaySpan.parentSpanId).toBe('');
    expect(gatewaySpan.attributes['http.route']).toBe('/v1/samples');

    const trace = await eventually(
      'the whole trace, every parent in it',
      async () => {
        const spans = otlp.spans().filter((s) => s.traceId === traceId);
        const grpcServer = spans.find((s) => s.service === 'notebook' && s.kind === SPAN_KIND.server);
        const postgres = spans.find((s) => s.service === 'notebook' && isPostgres(s));
        const audit = spans.find((s) => s.service === 'audit' && s.kind === SPAN_KIND.consumer);
        const auditPostgres = spans.find((s) => s.service === 'audit' && isPostgres(s));
        return grpcServer && postgres && audit && auditPostgres && parentsPresent(spans) ? { spans, grpcServer, postgres, audit, auditPostgres } : undefined;
      },
      30_000,
    );

    // one root, the gateway's span
    expect(trace.spans.filter((s) => !s.parentSpanId)).toEqual([gatewaySpan]);
    // notebook's gRPC server span is the child of the gateway's gRPC client span, under the request
    const grpcChain = ancestry(trace.grpcServer, trace.spans);
    expect(grpcChain[1]).toMatchObject({ service: 'gateway', kind: SPAN_KIND.client });
    expect(grpcChain.at(-1)).toBe(gatewaySpan);
    // its statements are inside the call
    expect(ancestry(trace.postgres, trace.spans)).toContain(trace.grpcServer);
    // the audit consumer continues the trace through the outbox and RabbitMQ: its
    // parent is notebook's publish of the row the call wrote, in the call's trace
    const auditChain = ancestry(trace.audit, trace.spans);
    expect(auditChain[1]).toMatchObject({
      service: 'notebook',
      kind: SPAN_KIND.producer,
      attributes: expect.objectContaining({ [ROUTING_KEY]: 'audit.record' }),
    });
    expect(auditChain).toContain(trace.grpcServer);
    expect(auditChain.at(-1)).toBe(gatewaySpan);
    expect(ancestry(trace.auditPostgres, trace.spans)).toContain(trace.audit);
  });

  it("puts the webhook delivery in the sample's trace and sends the receiver its traceparent", async () => {
    expect(traceId).toBeDefined();
    const delivered = await eventually('the delivery of the sample', async () => deliveries.find((d) => d.sampleId === sampleId), 30_000);
    // traceparent: version-traceid-parentid-flags
    const [, headerTrace, headerParent] = (delivered.traceparent ?? '').split('-');
    expect(headerTrace).toBe(traceId);

    const trace = await eventually(
      'the delivery spans',
      async () => {
        const spans = otlp.spans().filter((s) => s.traceId === traceId);
        const deliver = spans.find((s) => s.service === 'webhooks' && s.name === 'deliver sample.created');
        const post =
          deliver && spans.find((s) => s.service === 'webhooks' && s.kind === SPAN_KIND.client && s.parentSpanId === deliver.spanId && isHttpPost(s));
        return deliver && post && parentsPresent(spans) ? { spans, deliver, post } : undefined;
      },
      30_000,
    );
    // the receiver was sent the context of the delivery's HTTP client span
    expect(headerParent).toBe(trace.post.spanId);
    // the delivery descends from the webhooks consumer of sample.created, and so from the request
    const chain = ancestry(trace.deliver, trace.spans);
    expect(chain[1]).toMatchObject({ service: 'webhooks', kind: SPAN_KIND.consumer });
    expect(chain[2]).toMatchObject({ service: 'notebook', kind: SPAN_KIND.producer, attributes: expect.objectContaining({ [ROUTING_KEY]: 'sample.created' }) });
    expect(chain.at(-1)).toMatchObject({ service: 'gateway', kind: SPAN_KIND.server, parentSpanId: '' });
  });

  it('writes the trace and span ids of the active span on a log line, beside its request id', async () => {
    // a process of its own, as a service: tracing first, then the kit's logger
    const script = `const t = require('@lab/kit/tracing'); t.startTracing('log-probe'); const kit = require('@lab/kit');
      const log = kit.createLogger('log-probe');
      kit.requestScope
        .run({ request_id: 'probe-request' }, () => t.inSpan('probe span', t.SpanKind.INTERNAL, undefined, {}, async () => log.info('inside')))
        .then(() => log.info('outside'))
        .then(() => t.stopTracing());`;
    // not spawnSync: the receiver in this process must answer the export meanwhile
    const r = await runNode(script, { ...process.env, OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint });
    expect(r.status).toBe(0);
    const lines = jsonLines(r.stdout);
    const inside = lines.find((l) => l.msg === 'inside');
    const outside = lines.find((l) => l.msg === 'outside');
    // stopTracing sent the span before the process ended
    const span = otlp.spans().find((s) => s.service === 'log-probe' && s.name === 'probe span');
    expect(span).toBeDefined();
    expect(inside).toMatchObject({ request_id: 'probe-request', trace_id: span!.traceId, span_id: span!.spanId });
    expect(outside).toBeDefined();
    expect(outside).not.toHaveProperty('trace_id');
    expect(outside).not.toHaveProperty('span_id');
  });
});

describeCluster('tracing off', () => {
  jest.setTimeout(120_000);

  it('loads no OpenTelemetry SDK nor instrumentation without an OTLP endpoint', () => {
    // a process as a service starts: tracing first, then the kit (pg, gRPC, http)
    const probe = (env: Record<string, string>) => {
      const script = `const t = require('@lab/kit/tracing'); t.startTracing('probe'); require('@lab/kit');
        const loaded = Object.keys(require.cache).filter((f) => f.includes('@opentelemetry') && !f.includes('@opentelemetry/api/'));
        console.log(JSON.stringify({ on: t.tracingOn(), sdk: loaded.some((f) => f.includes('sdk-trace')), instrumentations: loaded.filter((f) => /instrumentation-[a-z]+\\/dist\\/index/.test(f)).length }));`;
      const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('OTEL_')));
      const r = spawnSync(process.execPath, ['-e', script], { cwd: root, env: { ...clean, ...env }, encoding: 'utf8', timeout: 60_000 });
      expect(r.status).toBe(0);
      return JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { on: boolean; sdk: boolean; instrumentations: number };
    };
    expect(probe({})).toEqual({ on: false, sdk: false, instrumentations: 0 });
    // the same probe sees them when an endpoint is set (nothing is sent: no span is made)
    const on = probe({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9' });
    expect(on.on).toBe(true);
    expect(on.sdk).toBe(true);
    expect(on.instrumentations).toBeGreaterThanOrEqual(3);
  });

  it('exports nothing and writes no trace fields when switched off, though an endpoint is set', async () => {
    const otlp = await startOtlpReceiver();
    const services = ['identity', 'notebook', 'audit'];
    let cluster: Cluster | undefined;
    try {
      cluster = await startCluster({
        services,
        // the standard off switch: with it the endpoint is ignored
        serviceEnv: everyProcess(services, { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint, OTEL_SDK_DISABLED: 'true', OTEL_BSP_SCHEDULE_DELAY: '200' }),
      });
      const { orgId, token } = await seedOrg(cluster);
      const created = await request(cluster.url, 'POST', '/v1/samples', {
        token,
        body: { name: 'untraced sample', type: 'tracing' },
        headers: { 'Idempotency-Key': `untraced-${randomUUID()}` },
      });
      expect(created.status).toBe(201);
      // the audit consumer has handled the write's record
      await eventually(
        'the audit record of the sample',
        async () => {
          const rows = await query<{ n: number }>(cluster!.databaseUrl, 'select count(*)::int as n from audit.records where org_id = $1 and record_id = $2', [
            orgId,
            created.body.data.id,
          ]);
          return rows[0]!.n > 0 ? true : undefined;
        },
        30_000,
      );
    } finally {
      // a graceful stop sends whatever spans a process still holds: after it, none can come
      await cluster?.stop();
      await otlp.close();
    }
    expect(otlp.requests()).toBe(0);
    const lines = ['gateway', ...services].flatMap((s) => jsonLines(cluster.output(s)));
    expect(lines.length).toBeGreaterThan(0);
    expect(lines.filter((l) => 'trace_id' in l || 'span_id' in l)).toEqual([]);
  });
});

describeCluster('tracing in the standalone process', () => {
  jest.setTimeout(150_000);

  it("carries a keyed write's trace through the in-process bus to the audit consumer, and a job's to its run", async () => {
    const otlp = await startOtlpReceiver();
    const baseUrl = new URL(process.env.DATABASE_URL!);
    const dbName = `lab_trace_${randomBytes(5).toString('hex')}`;
    await query(baseUrl.toString(), `create database ${dbName}`);
    const databaseUrl = new URL(baseUrl);
    databaseUrl.pathname = `/${dbName}`;
    const dataDir = await mkdtemp(join(tmpdir(), 'lab-trace-'));
    const operatorToken = `op_${randomBytes(24).toString('hex')}`;
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      DATABASE_URL: databaseUrl.toString(),
      PORT: '0',
      HOST: '127.0.0.1',
      METRICS_PORT: '0',
      LAB_DATA_DIR: dataDir,
      LAB_OPERATOR_TOKEN: operatorToken,
      OTEL_EXPORTER_OTLP_ENDPOINT: otlp.endpoint,
      OTEL_BSP_SCHEDULE_DELAY: '200',
    };
    // the in-process bus: no broker
    delete env.AMQP_URL;
    delete env.NODE_OPTIONS;
    const child = spawn(process.execPath, [join(root, 'services/standalone/dist/main.js')], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    try {
      const url = await new Promise<string>((resolve, reject) => {
        const onData = (b: Buffer) => {
          output += b.toString();
          const ready = jsonLines(output).find((l) => typeof l.msg === 'string' && l.msg.startsWith('lab notebook service ready on '));
          if (ready) resolve(String(ready.url));
        };
        child.stdout.on('data', onData);
        child.stderr.on('data', onData);
        child.once('exit', (code) => reject(new Error(`the standalone exited (${code}) before it was ready:\n${output.slice(-3000)}`)));
      });
      const { orgId, token } = await seedOrg({ url, operatorToken } as Cluster);
      const created = await request(url, 'POST', '/v1/samples', {
        token,
        body: { name: 'traced in one process', type: 'tracing' },
        headers: { 'Idempotency-Key': `standalone-${randomUUID()}` },
      });
      expect(created.status).toBe(201);
      expect(orgId).toBeDefined();

      const rootSpan = await eventually(
        'the server span of the POST',
        async () => otlp.spans().find((s) => s.service === 'lab' && s.kind === SPAN_KIND.server && s.name === 'POST /v1/samples'),
        30_000,
      );
      const trace = await eventually(
        'the audit consumer in the trace',
        async () => {
          const spans = otlp.spans().filter((s) => s.traceId === rootSpan.traceId);
          const audit = spans.find((s) => s.kind === SPAN_KIND.consumer && s.attributes[ROUTING_KEY] === 'audit.record');
          return audit && parentsPresent(spans) ? { spans, audit } : undefined;
        },
        30_000,
      );
      expect(trace.spans.filter((s) => !s.parentSpanId)).toEqual([rootSpan]);
      const chain = ancestry(trace.audit, trace.spans);
      // consumer <- the relay's publish <- ... <- the service's gRPC server span <- the request
      expect(chain[1]).toMatchObject({ kind: SPAN_KIND.producer, name: 'publish audit.record' });
      // (the notebook's records engine: lab.common.v1.RecordService, over loopback gRPC)
      expect(chain.some((s) => s.kind === SPAN_KIND.server && s.name === 'grpc.lab.common.v1.RecordService/CreateRecord')).toBe(true);
      expect(chain.at(-1)).toBe(rootSpan);

      // a background job: its run, whenever the worker takes it, is in the trace of the request that asked for it
      const job = await request(url, 'POST', '/v1/jobs', { token, body: { job_type: 'box_layout_pdf', input: { rows: 2, cols: 2 } } });
      expect(job.status).toBe(202);
      const jobTrace = await eventually(
        'the run of the job in the trace of its request',
        async () => {
          const spans = otlp.spans();
          const post = spans.find((s) => s.kind === SPAN_KIND.server && s.name === 'POST /v1/jobs');
          const inTrace = post ? spans.filter((s) => s.traceId === post.traceId) : [];
          const run = inTrace.find((s) => s.name === 'run box_layout_pdf' && s.attributes['lab.job.id'] === job.body.data.id);
          return post && run && parentsPresent(inTrace) ? { post, run, spans: inTrace } : undefined;
        },
        60_000,
      );
      expect(ancestry(jobTrace.run, jobTrace.spans).at(-1)).toBe(jobTrace.post);
    } finally {
      child.kill('SIGTERM');
      const killer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      await exited;
      clearTimeout(killer);
      await otlp.close();
      await query(baseUrl.toString(), `drop database if exists ${dbName} with (force)`).catch(() => undefined);
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
