import { createServer, type Server } from 'node:http';
import client from 'prom-client';
import type { Logger } from './logger.js';
import { listenLogged } from './waits.js';

/**
 * The process's metrics, created once. In standalone mode several services share
 * one process, so every series carries a `service` label instead of a prefix.
 */
function build() {
  const register = client.register;
  client.collectDefaultMetrics({ register });
  return {
    register,
    grpcServerDuration: new client.Histogram({
      name: 'lab_grpc_server_duration_seconds',
      help: 'gRPC unary call duration by service, method and status code',
      labelNames: ['service', 'method', 'code'] as const,
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    }),
    httpDuration: new client.Histogram({
      name: 'lab_http_request_duration_seconds',
      help: 'HTTP request duration by route and status',
      labelNames: ['method', 'route', 'status'] as const,
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    }),
    outboxPublished: new client.Counter({
      name: 'lab_outbox_published_total',
      help: 'Events published from the outbox',
      labelNames: ['service'] as const,
    }),
    outboxPublishFailures: new client.Counter({
      name: 'lab_outbox_publish_failures_total',
      help: 'Failed outbox publish attempts',
      labelNames: ['service'] as const,
    }),
    outboxDeadLetters: new client.Counter({
      name: 'lab_outbox_dead_letters_total',
      help: 'Messages set aside in the dead-letter table (a consumer gave up on them, or the broker kept refusing them)',
      labelNames: ['service'] as const,
    }),
    outboxBacklog: new client.Gauge({
      name: 'lab_outbox_backlog',
      help: 'Unpublished outbox rows seen at the last relay pass',
      labelNames: ['service'] as const,
    }),
    consumed: new client.Counter({
      name: 'lab_bus_consumed_total',
      help: 'Bus messages handled by outcome (ok, duplicate, retry, dead)',
      labelNames: ['queue', 'outcome'] as const,
    }),
    outboxLag: new client.Histogram({
      name: 'lab_outbox_lag_seconds',
      help: 'Time from an outbox row being written to its publication being confirmed',
      labelNames: ['service'] as const,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
    }),
    consumeLag: new client.Histogram({
      name: 'lab_bus_consume_lag_seconds',
      help: 'Time from an event occurring to a consumer handling it, by queue',
      labelNames: ['queue'] as const,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
    }),
    rateLimited: new client.Counter({
      name: 'lab_rate_limit_rejections_total',
      help: 'Requests rejected by the per-token rate limit',
    }),
    idempotentReplays: new client.Counter({
      name: 'lab_idempotent_replays_total',
      help: 'Responses replayed from an idempotency record',
    }),
  };
}

let instance: ReturnType<typeof build> | undefined;
export const metrics = () => (instance ??= build());

/** Named dependency checks of a process (database, bus, ...): true means up. */
export type Readiness = () => Promise<Record<string, boolean>>;

/** A check that has not answered by then counts as down: a probe must not hang. */
const CHECK_TIMEOUT_MS = 2_000;

/** Runs a check with a deadline; false when it throws or does not answer in time. */
export async function probe(check: () => Promise<unknown> | unknown, timeoutMs = CHECK_TIMEOUT_MS): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), timeoutMs);
    timer.unref();
  });
  try {
    return await Promise.race([Promise.resolve().then(check).then((v) => v !== false), deadline]);
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
  }
}

/** Readiness of a process that needs its database and its bus. */
export const dependencyReadiness =
  (deps: { db: { ping(): Promise<void> }; bus: { readonly connected: boolean } }): Readiness =>
  async () => ({ database: await probe(() => deps.db.ping()), bus: deps.bus.connected });

/**
 * The operations endpoints of a process, apart from its API so they are never
 * exposed through the ingress: /metrics (Prometheus text), /livez (the event loop
 * answers) and /readyz (200 when every dependency is up, else 503 naming what is down).
 * Returned unlistened so tests can bind it to an ephemeral port.
 */
export function createMetricsServer(readiness: Readiness = async () => ({})): Server {
  const m = metrics();
  return createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    const reply = (status: number, body: unknown) => {
      res.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', 'Cache-Control': 'no-store' });
      res.end(JSON.stringify(body));
    };
    if (req.method !== 'GET' && req.method !== 'HEAD') return reply(405, { status: 'method_not_allowed' });
    switch (path) {
      case '/metrics':
        m.register.metrics().then(
          (text) => {
            res.writeHead(200, { 'Content-Type': m.register.contentType });
            res.end(text);
          },
          () => reply(500, { status: 'error' }),
        );
        return;
      case '/livez':
        return reply(200, { status: 'ok' });
      case '/readyz':
        readiness().then(
          (checks) => {
            const down = Object.keys(checks).filter((k) => !checks[k]);
            reply(down.length ? 503 : 200, { status: down.length ? 'unavailable' : 'ok', checks, ...(down.length ? { down } : {}) });
          },
          () => reply(503, { status: 'unavailable', checks: {}, down: ['readiness'] }),
        );
        return;
      default:
        return reply(404, { status: 'not_found' });
    }
  });
}

export interface ServeMetricsOptions {
  readiness?: Readiness;
  host?: string;
  /** where errors of the listener are logged */
  log: Logger;
}

/**
 * Serves the operations endpoints on their own port. Port 0 means "off" (no
 * listener; undefined is returned): standalone and local multi-process runs use it
 * so several processes on one host do not fight over the default port 9464.
 */
export async function serveMetrics(port: number, opts: ServeMetricsOptions): Promise<Server | undefined> {
  if (port === 0) return undefined;
  const server = createMetricsServer(opts.readiness);
  await listenLogged(server, port, opts.host ?? '0.0.0.0', (err) => opts.log.error({ err: err.message }, 'operations server error'));
  return server;
}

/** Default operations port of every process; in the cluster each pod has its own. */
export const DEFAULT_METRICS_PORT = 9464;
