import { BUNDLED_EVENT_TYPES, DURABLE_QUEUES } from '@lab/contracts';
import type { Server } from 'node:http';
import { z } from 'zod';
import { AmqpBus, MemoryBus, type Bus, type BusQueueType } from './bus.js';
import { commonEnv, loadConfig } from './config.js';
import { createLogger, errText, type Logger } from './logger.js';
import { migrate, openDatabase } from './db.js';
import { DEFAULT_METRICS_PORT, serveMetrics, type Readiness } from './metrics.js';
import { runService, type ServiceDefinition } from './service.js';
import { addressVariablesAreTargets } from './grpc-target.js';
import { stopTracing } from './tracing.js';

/**
 * Ends the process with a fatal line when its start fails (the database or the
 * broker unreachable past the retries, a port taken), and when it crashes later
 * (an exception or a rejection nothing handled). Node would end it too, but with
 * a bare stack trace on stderr: this way what ended the process is one line in
 * its own log format, with the request id of the flow it came from, where the
 * operator reads everything else it logged. The exit code is 1 either way.
 */
export function exitOnFailure(log: Logger, start: Promise<unknown>): void {
  const fatal = (what: string) => (err: unknown) => {
    log.fatal({ err }, what);
    process.exit(1);
  };
  process.on('uncaughtException', fatal('uncaught exception'));
  process.on('unhandledRejection', fatal('unhandled rejection'));
  start.catch(fatal('failed to start'));
}

/**
 * How long a cluster process keeps serving after SIGTERM, unready, unless
 * LAB_SHUTDOWN_DRAIN_MS says otherwise. On Kubernetes the pod's address leaves
 * the ingress controller's and kube-proxy's endpoint lists (and the callers' DNS)
 * some seconds after the SIGTERM, not before it: until then new connections still
 * come, and a process that closed its listener at once refused them (1,358
 * requests of a rollout measured so). Over 5 s with a margin, as endpoint
 * propagation takes up to about 5 s; inside the chart's 30 s grace period with the
 * in-flight calls (10 s) and the outbox flush (5 s) after it. Decision 053.
 */
export const SHUTDOWN_DRAIN_MS = 8_000;

/** The drain before a stop (stopOnSignals). */
export interface StopDrain {
  /** how long to keep serving, unready, before the stop (LAB_SHUTDOWN_DRAIN_MS) */
  ms: number;
  /**
   * Turns the process unready while it still serves: /readyz answers 503, gRPC
   * health NOT_SERVING, HTTP answers close their keep-alive connections.
   */
  begin(): void;
}

/**
 * Stops gracefully on the first SIGTERM or SIGINT and exits 0; a stop that fails
 * is logged as fatal and exits 1, so a supervisor sees it, instead of an
 * unhandled rejection that skips the rest of the stop. With a drain, the first
 * signal only turns the process unready and the stop begins `drain.ms` later; a
 * second signal in that time begins it at once (an operator's second Ctrl-C, a
 * supervisor in a hurry). Signals after that wait for the stop.
 */
export function stopOnSignals(log: Logger, stop: () => Promise<void>, stoppingMessage = 'stopping', drain?: StopDrain): void {
  let stopping = false;
  let endDrain: (() => void) | undefined;
  const onSignal = (signal: string) => {
    if (endDrain) {
      log.info({ signal }, 'drain cut short: stopping now');
      endDrain();
      return;
    }
    if (stopping) return;
    stopping = true;
    log.info({ signal, drain_ms: drain?.ms ?? 0 }, stoppingMessage);
    const drained = new Promise<void>((resolve) => {
      if (!drain?.ms) {
        resolve();
        return;
      }
      drain.begin();
      const timer = setTimeout(() => endDrain?.(), drain.ms);
      endDrain = () => {
        endDrain = undefined;
        clearTimeout(timer);
        resolve();
      };
    });
    // the spans of what the stop finished are sent before the process ends
    drained.then(stop).then(
      () => stopTracing().then(() => process.exit(0)),
      (err: unknown) => {
        log.fatal({ err }, 'stop failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => onSignal('SIGTERM'));
  process.on('SIGINT', () => onSignal('SIGINT'));
}

/**
 * Opens the bus of a process: RabbitMQ when AMQP_URL is set (declaring every
 * durable queue of the deployment, consumed here or not, as LAB_BUS_QUEUE_TYPE
 * says: quorum unless set), else in-process.
 */
export async function openBus(
  cfg: { AMQP_URL?: string; LAB_EVENTS_EXCHANGE: string; LAB_BUS_QUEUE_EXPIRES_MS: number; LAB_BUS_QUEUE_TYPE?: BusQueueType },
  log: Logger,
): Promise<Bus> {
  if (!cfg.AMQP_URL) return new MemoryBus(log);
  const expires = cfg.LAB_BUS_QUEUE_EXPIRES_MS ? { queueExpiresMs: cfg.LAB_BUS_QUEUE_EXPIRES_MS } : {};
  return AmqpBus.connect(cfg.AMQP_URL, cfg.LAB_EVENTS_EXCHANGE, log, {
    declare: DURABLE_QUEUES,
    bundledTypes: BUNDLED_EVENT_TYPES,
    queueType: cfg.LAB_BUS_QUEUE_TYPE,
    ...expires,
  });
}

const serviceEnv = commonEnv
  .extend({
    GRPC_PORT: z.coerce.number().int().min(0).max(65535).default(50051),
    GRPC_HOST: z.string().default('0.0.0.0'),
    /** clients' connections are closed after this long (0: never), so they re-resolve and reach new pods */
    GRPC_MAX_CONNECTION_AGE_MS: z.coerce.number().int().min(0).max(86_400_000).default(120_000),
    LAB_INTERNAL_SECRET: z.string().min(16, 'must be at least 16 characters'),
    AMQP_URL: z.string().min(1, 'a service process of the cluster needs RabbitMQ'),
  })
  // the addresses of the services it calls (<NAME>_ADDR), read when first needed
  .catchall(z.string().optional())
  .superRefine(addressVariablesAreTargets);

/**
 * Entry point of one service in its own process (cluster shape): validated env,
 * RabbitMQ, the service, metrics port, graceful stop on SIGTERM/SIGINT.
 */
export function runServiceMain(def: ServiceDefinition): void {
  const log = createLogger(def.name);
  exitOnFailure(log, startServiceProcess(def, log));
}

async function startServiceProcess(def: ServiceDefinition, log: Logger): Promise<void> {
  let cfg: z.infer<typeof serviceEnv>;
  try {
    cfg = loadConfig(serviceEnv);
  } catch (err) {
    log.fatal((err as Error).message);
    process.exit(78);
  }
  const bus = await openBus(cfg, log);
  const svc = await runService(def, {
    log,
    bus,
    secret: cfg.LAB_INTERNAL_SECRET,
    databaseUrl: cfg.DATABASE_URL,
    dataDir: cfg.LAB_DATA_DIR,
    poolSize: cfg.DATABASE_POOL_SIZE,
    preparedStatements: cfg.DATABASE_PREPARED_STATEMENTS,
    directDatabaseUrl: cfg.DATABASE_DIRECT_URL,
    grpcAddress: `${cfg.GRPC_HOST}:${cfg.GRPC_PORT}`,
    grpcMaxConnectionAgeMs: cfg.GRPC_MAX_CONNECTION_AGE_MS,
    outboxStopFlushMs: cfg.LAB_OUTBOX_STOP_FLUSH_MS,
  });
  const metricsServer = await serveOps(cfg.METRICS_PORT ?? DEFAULT_METRICS_PORT, svc.readiness, log, cfg.METRICS_HOST);
  log.info({ port: svc.port }, `${def.name} ready`);
  stopOnSignals(
    log,
    async () => {
      await svc.stop();
      await bus.close();
      metricsServer?.close();
    },
    'stopping',
    { ms: cfg.LAB_SHUTDOWN_DRAIN_MS ?? SHUTDOWN_DRAIN_MS, begin: () => svc.drain() },
  );
}

/**
 * The operations port of a cluster process. A port already taken is logged, not
 * fatal: several processes on one host (local runs, the benchmark) would otherwise
 * stop each other; in a pod it cannot happen, and there a missing listener shows
 * as a failing readiness probe.
 */
export async function serveOps(port: number, readiness: Readiness, log: Logger, host?: string): Promise<Server | undefined> {
  try {
    const server = await serveMetrics(port, { readiness, log, host });
    if (server) log.info({ port }, 'metrics and probes serving');
    return server;
  } catch (err) {
    log.error({ err: errText(err), port }, 'metrics port unavailable; metrics and probes not served');
    return undefined;
  }
}

const migrateEnv = commonEnv.extend({
  DATABASE_URL: z.url("a migration needs the service's PostgreSQL URL"),
});

/**
 * Applies a service's migrations and exits: the entry of the chart's pre-install /
 * pre-upgrade hook Job, so schema changes run once per release, before new pods
 * start, instead of racing in every replica (runService still migrates under the
 * same lock, which then finds nothing to do).
 */
export async function runMigrationsMain(def: Pick<ServiceDefinition, 'name' | 'schema' | 'migrationsDir'>): Promise<void> {
  const log = createLogger(`${def.name}-migrate`);
  let cfg: z.infer<typeof migrateEnv>;
  try {
    cfg = loadConfig(migrateEnv);
  } catch (err) {
    log.fatal((err as Error).message);
    process.exit(78);
  }
  try {
    // PostgreSQL itself when the service's URL is a pooler (DATABASE_DIRECT_URL)
    const db = await openDatabase({
      url: cfg.DATABASE_DIRECT_URL ?? cfg.DATABASE_URL,
      poolSize: 1,
      name: `${def.name}-migrate`,
      preparedStatements: cfg.DATABASE_PREPARED_STATEMENTS,
    });
    try {
      const applied = await migrate(db, def.schema, def.migrationsDir);
      log.info({ applied }, applied.length ? 'migrations applied' : 'schema up to date');
    } finally {
      await db.close();
    }
  } catch (err) {
    log.fatal({ err }, 'migration failed');
    process.exit(1);
  }
  process.exit(0);
}
