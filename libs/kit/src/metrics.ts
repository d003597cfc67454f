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
  return { register, ...callMetrics(), ...busMetrics(), ...edgeMetrics(), ...databaseMetrics(), ...peerMetrics(), ...scrapedMetrics() };
}

/** How long the calls a process serves take: gRPC and HTTP. */
function callMetrics() {
  return {
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
  };
}

/** The outbox relay and the bus consumers: what was published, refused, parked, handled, and how late. */
function busMetrics() {
  return {
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
      help:
        'Bus messages handled by outcome: ok, duplicate, retry (the handler failed for a reason of its own; counts toward parking), ' +
        'wait (a database or peer was away; retried while the outage lasts), dead',
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
  };
}

/** The gateway's own counts: rate-limit refusals, replayed answers, failing stores. */
function edgeMetrics() {
  return {
    rateLimited: new client.Counter({
      name: 'lab_rate_limit_rejections_total',
      help: 'Requests rejected by the per-token rate limit',
    }),
    idempotentReplays: new client.Counter({
      name: 'lab_idempotent_replays_total',
      help: 'Responses replayed from an idempotency record',
    }),
    rateLimitBackendErrors: new client.Counter({
      name: 'lab_rate_limit_backend_errors_total',
      help: 'Rate-limit counter store (Redis) commands that failed; the request was let through (fail open)',
    }),
    idempotencyStoreErrors: new client.Counter({
      name: 'lab_idempotency_store_errors_total',
      help:
        "Idempotency-Key records that failed, by operation: read and keep (the gateway's refusals: read failing answers 503, " +
        "keep failing lets a retry run again), receipt_lookup and receipt_keep (a service's receipts: an answer not kept is a 409 for the retry)",
      labelNames: ['operation'] as const,
    }),
  };
}

/** Group commit and shared reads: how many writes and reads shared a transaction or a connection. */
function databaseMetrics() {
  return {
    embeddedMaintainedTables: new client.Counter({
      name: 'lab_db_embedded_maintained_tables_total',
      help: 'Tables the embedded database vacuumed and analyzed because they grew (it runs no autovacuum)',
    }),
    embeddedMaintenanceFailures: new client.Counter({
      name: 'lab_db_embedded_maintenance_failures_total',
      help: 'Maintenance passes of the embedded database that failed (the next pass tries again)',
    }),
    sharedTransactions: new client.Counter({
      name: 'lab_db_shared_transactions_total',
      help: 'Transactions that several writes shared (group commit), by outcome: committed, or rerun (a member failed, so each ran again alone)',
      labelNames: ['outcome'] as const,
    }),
    sharedTransactionWrites: new client.Counter({
      name: 'lab_db_shared_transaction_writes_total',
      help: 'Writes that ran in a shared transaction, by outcome (committed together, or rerun alone)',
      labelNames: ['outcome'] as const,
    }),
    sharedReadGroups: new client.Counter({
      name: 'lab_db_shared_read_groups_total',
      help: 'Connections taken for shared reads: the queries begun in one turn, sent pipelined on one connection',
    }),
    sharedReads: new client.Counter({
      name: 'lab_db_shared_reads_total',
      help: 'Queries sent as shared reads (divided by lab_db_shared_read_groups_total: the mean group size)',
    }),
  };
}

/** Calls to peer services: batches sent, and calls that failed on an unavailable or slow peer. */
function peerMetrics() {
  return {
    callBatches: new client.Counter({
      name: 'lab_grpc_call_batches_total',
      help: 'Batches of calls sent to a peer: calls of one caller to one read method begun in one turn, sent as one call (lab.common.v1.BatchService)',
      labelNames: ['peer'] as const,
    }),
    batchedCalls: new client.Counter({
      name: 'lab_grpc_batched_calls_total',
      help: 'Calls sent to a peer inside batches (divided by lab_grpc_call_batches_total: the mean batch size)',
      labelNames: ['peer'] as const,
    }),
    upstreamFailures: new client.Counter({
      name: 'lab_upstream_failures_total',
      help: 'gRPC calls to a peer service that failed because it was unavailable or out of time, by peer and gRPC code',
      labelNames: ['peer', 'code'] as const,
    }),
    // Read at scrape time from the sources registered below (one count query per
    // service and scrape): a counter of parked messages cannot say whether any are
    // still there after an operator replayed or dropped them; the table can.
  };
}

/** Gauges read at scrape time from the sources registered below. */
function scrapedMetrics() {
  return {
    deadLetters: new client.Gauge({
      name: 'lab_dead_letters',
      help: 'Messages waiting in the dead-letter table of a service (parked by a consumer or refused by the broker)',
      labelNames: ['service'] as const,
      async collect() {
        await collectSources(this, deadLetterSources);
      },
    }),
    outboxPending: new client.Gauge({
      name: 'lab_outbox_pending',
      help: 'Rows waiting in the outbox of a service, counted at scrape time (lab_outbox_backlog is what one relay pass claimed, at most a batch)',
      labelNames: ['service'] as const,
      async collect() {
        await collectSources(this, outboxPendingSources);
      },
    }),
    dbPoolWaiting: new client.Gauge({
      name: 'lab_db_pool_waiting',
      help: 'Queries waiting for a free connection of the PostgreSQL pool',
      labelNames: ['pool'] as const,
      collect() {
        for (const [pool, p] of poolSources) this.set({ pool }, p.waitingCount);
      },
    }),
    dbPoolConnections: new client.Gauge({
      name: 'lab_db_pool_connections',
      help: 'Connections of the PostgreSQL pool by state (idle, busy) and its maximum (max)',
      labelNames: ['pool', 'state'] as const,
      collect() {
        for (const [pool, p] of poolSources) {
          this.set({ pool, state: 'idle' }, p.idleCount);
          this.set({ pool, state: 'busy' }, p.totalCount - p.idleCount);
          this.set({ pool, state: 'max' }, p.max);
        }
      },
    }),
  };
}

/** A count read at scrape time, by the service it belongs to. */
type CountSource = () => Promise<number>;
const deadLetterSources = new Map<string, CountSource>();
const outboxPendingSources = new Map<string, CountSource>();

/** What the pool gauges read of a pg.Pool. */
export interface PoolStats {
  readonly waitingCount: number;
  readonly idleCount: number;
  readonly totalCount: number;
  readonly max: number;
}
const poolSources = new Map<string, PoolStats>();

/** A source that does not answer in time is left out of this scrape, not waited for. */
const SOURCE_TIMEOUT_MS = 1_000;

async function collectSources(gauge: client.Gauge<'service'>, sources: Map<string, CountSource>): Promise<void> {
  gauge.reset();
  await Promise.all(
    [...sources].map(async ([service, read]) => {
      const n = await Promise.race([read().catch(() => undefined), new Promise<undefined>((r) => setTimeout(() => r(undefined), SOURCE_TIMEOUT_MS).unref())]);
      if (n !== undefined) gauge.set({ service }, n);
    }),
  );
}

/**
 * Counts a service's outbox rows and dead letters at each scrape (lab_outbox_pending,
 * lab_dead_letters); returns the unregistration.
 */
export function registerOutboxCounts(service: string, counts: { pending: CountSource; deadLetters: CountSource }): () => void {
  outboxPendingSources.set(service, counts.pending);
  deadLetterSources.set(service, counts.deadLetters);
  return () => {
    if (outboxPendingSources.get(service) === counts.pending) outboxPendingSources.delete(service);
    if (deadLetterSources.get(service) === counts.deadLetters) deadLetterSources.delete(service);
  };
}

/** Reports a PostgreSQL pool's waits and connections at each scrape; returns the unregistration. */
export function registerPool(name: string, pool: PoolStats): () => void {
  poolSources.set(name, pool);
  return () => {
    if (poolSources.get(name) === pool) poolSources.delete(name);
  };
}

let instance: ReturnType<typeof build> | undefined;
export const metrics = () => (instance ??= build());

/** Named dependency checks of a process (database, bus, ...): true means up. */
export type Readiness = () => Promise<Record<string, boolean>>;

/** A check that has not answered by then counts as down: a probe must not hang. */
const CHECK_TIMEOUT_MS = 2_000;

/** Runs a check with a deadline; false when it throws or does not answer in time. */
export async function probe(check: () => unknown, timeoutMs = CHECK_TIMEOUT_MS): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), timeoutMs);
    timer.unref();
  });
  try {
    return await Promise.race([
      Promise.resolve()
        .then(check)
        .then((v) => v !== false),
      deadline,
    ]);
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
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      reply(405, { status: 'method_not_allowed' });
      return;
    }
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
        reply(200, { status: 'ok' });
        return;
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
        reply(404, { status: 'not_found' });
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
