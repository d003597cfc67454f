import type { Bus } from './bus.js';
import type { Database } from './db.js';
import { migrate, openDatabase } from './db.js';
import { GrpcServer } from './grpc.js';
import type { Logger } from './logger.js';
import { dependencyReadiness, type Readiness } from './metrics.js';
import { Outbox } from './outbox.js';
import { pruneInbox } from './inbox.js';
import { Receipts } from './receipts.js';
import { Housekeeping, type RetentionRule } from './housekeeping.js';
import { serveDeadLetters } from './dead-letters.js';

/** What a running service is given by its process (cluster main or standalone). */
export interface ServiceEnv {
  log: Logger;
  bus: Bus;
  /** internal secret for caller contexts */
  secret: string;
  /** this service's PostgreSQL URL; unset means embedded PGlite in dataDir */
  databaseUrl?: string;
  dataDir: string;
  poolSize?: number;
  /** named statements for repeated texts (DATABASE_PREPARED_STATEMENTS; OpenDatabaseOptions) */
  preparedStatements?: boolean;
  /** PostgreSQL itself when databaseUrl is a pooler: where migrations run (DATABASE_DIRECT_URL) */
  directDatabaseUrl?: string;
  /** gRPC listen address, e.g. 0.0.0.0:50051 or 127.0.0.1:0 */
  grpcAddress: string;
  /** age after which a client's connection is closed, so it re-resolves (GrpcServerOptions) */
  grpcMaxConnectionAgeMs?: number;
  /**
   * Where the other services listen (a gRPC target by service name), asked at call
   * time: in one process a peer may start after this service. Defaults to the
   * cluster's `<NAME>_ADDR` environment variables.
   */
  peers?: PeerAddresses;
  /** how often the housekeeping pass runs (default hourly; tests shorten it) */
  housekeepingMs?: number;
  /** how long a stop keeps publishing the outbox backlog (LAB_OUTBOX_STOP_FLUSH_MS) */
  outboxStopFlushMs?: number;
}

/** The gRPC target of a service by name (grpc-target.ts), or undefined when it is not deployed. */
export type PeerAddresses = (service: string) => string | undefined;

/** The cluster's address book: `NOTEBOOK_ADDR` and so on. */
export const envPeers: PeerAddresses = (service) => process.env[`${service.toUpperCase()}_ADDR`] || undefined;

/** What a service's own code gets to build its handlers and consumers. */
export interface ServiceDeps {
  log: Logger;
  bus: Bus;
  db: Database;
  outbox: Outbox;
  secret: string;
  /** where the other services listen (see ServiceEnv.peers) */
  peers: PeerAddresses;
  /** the process's data directory (LAB_DATA_DIR): default home of file stores */
  dataDir: string;
}

export interface ServiceDefinition {
  name: string;
  /** PostgreSQL schema owned by this service */
  schema: string;
  migrationsDir: string;
  /** adds gRPC services; may subscribe consumers and return a stop hook */
  register(server: GrpcServer, deps: ServiceDeps): Promise<(() => Promise<void>) | void>;
  /**
   * The service's own retention rules (expired rows and files it keeps only for a
   * while), asked once after register() and run with the kit's housekeeping. Each
   * must bound its own work (delete in batches) so no pass holds a table long.
   */
  retention?(deps: ServiceDeps): RetentionRule[];
}

export interface RunningService {
  name: string;
  port: number;
  address: string;
  deps: ServiceDeps;
  /** database and bus checks behind the process's /readyz, and `serving` (false once drain() was called) */
  readiness: Readiness;
  /**
   * The first step of a stop behind a balancer: the service turns unready (/readyz
   * 503, gRPC health NOT_SERVING) and goes on serving every call, so its callers'
   * balancers stop choosing it before stop() closes the listener.
   */
  drain(): void;
  /**
   * Graceful stop: stop accepting, finish calls, flush the outbox until
   * `flushDeadline` (epoch ms; default the service's stop flush time from now),
   * close the database. A process running several services gives them one
   * deadline, so their flushes share the time instead of adding up.
   */
  stop(flushDeadline?: number): Promise<void>;
  /**
   * Stops the outbox relay after publishing what it can until `deadline`: a
   * process of several services flushes them all, side by side, while every
   * consumer is still there, before it stops any of them.
   */
  flushOutbox(deadline: number): Promise<void>;
}

const HOUSEKEEPING_MS = 60 * 60_000;

/**
 * What every schema keeps only for a while (inbox ids past the redelivery
 * horizon, receipts of keyed writes past the gateway's retention), then the
 * service's own retention rules.
 */
function housekeepingOf(def: ServiceDefinition, deps: ServiceDeps, receipts: Receipts, everyMs = HOUSEKEEPING_MS): Housekeeping {
  const rules: RetentionRule[] = [
    ['inbox ids', () => pruneInbox(deps.db, def.schema)],
    ['call receipts', () => receipts.prune()],
    ...(def.retention?.(deps) ?? []),
  ];
  return new Housekeeping(rules, deps.log, { everyMs });
}

/**
 * The one start-up path of every service: database, migrations under lock,
 * outbox relay, gRPC server with health, then the service's own registration.
 */
export async function runService(def: ServiceDefinition, env: ServiceEnv): Promise<RunningService> {
  const log = env.log.child({ svc: def.name });
  const db = await openDatabase({
    url: env.databaseUrl,
    dataDir: env.dataDir,
    poolSize: env.poolSize,
    name: def.name,
    preparedStatements: env.preparedStatements,
  });
  const applied = await migrate(db, def.schema, def.migrationsDir, { url: env.directDatabaseUrl, name: `${def.name}-migrate` });
  if (applied.length) log.info({ applied }, 'migrations applied');
  const receipts = new Receipts(db, def.schema, log);
  const outbox = new Outbox({ service: def.name, schema: def.schema, db, bus: env.bus, log, receipts, stopFlushMs: env.outboxStopFlushMs });
  const deps: ServiceDeps = { log, bus: env.bus, db, outbox, secret: env.secret, peers: env.peers ?? envPeers, dataDir: env.dataDir };
  const server = new GrpcServer({ name: def.name, logger: log, secret: env.secret, receipts, maxConnectionAgeMs: env.grpcMaxConnectionAgeMs });
  const stopOwn = await def.register(server, deps);
  serveDeadLetters(server, outbox);
  const port = await server.listen(env.grpcAddress);
  outbox.start();
  const host = env.grpcAddress.replace(/:\d+$/, '');
  const address = `${host === '0.0.0.0' || host === '[::]' ? '127.0.0.1' : host}:${port}`;
  server.serveInProcess(address);
  const housekeeping = housekeepingOf(def, deps, receipts, env.housekeepingMs);
  housekeeping.start();
  log.info({ address }, 'grpc serving');
  const dependencies = dependencyReadiness(deps);
  let draining = false;
  return {
    name: def.name,
    port,
    address,
    deps,
    readiness: async () => ({ ...(await dependencies()), serving: !draining }),
    drain: () => {
      draining = true;
      server.setServing(false);
    },
    flushOutbox: (deadline) => outbox.stop(deadline),
    stop: async (flushDeadline?: number) => {
      await housekeeping.stop();
      await server.shutdown();
      if (stopOwn) await stopOwn();
      await outbox.stop(flushDeadline);
      await receipts.flush();
      await db.close();
    },
  };
}
