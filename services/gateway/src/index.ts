import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { join } from 'node:path';
import { ClientDocuments, oauthStateKey, StateSigner, type ClientDocumentOptions } from '@lab/functions';
import { dependencyReadiness, Housekeeping, listenLogged, migrate, openDatabase, OutageLog, type Bus, type Logger, type Readiness } from '@lab/kit';
import { RateLimiter } from '@lab/rate-limits';
import { JobEventsHub } from '@lab/realtime';
import { createApp } from './app.js';
import { functionsHost } from './functions-host.js';
import { Authenticator } from './auth.js';
import { Clients } from './clients.js';
import { AnsweredKeys } from './answered-keys.js';
import { KeyedRefusals } from './idempotency.js';
import { invalidateFromEvent, PrincipalCache } from './principal-cache.js';
import { answerClientErrorsWithEnvelope } from './client-errors.js';
import type { TrustProxy } from './client-address.js';

export { trustProxySetting } from './client-address.js';
export { clientDocumentsEnv, clientDocumentsOptions } from './client-documents-config.js';

export interface GatewayOptions {
  /** HTTP port; 0 asks the OS for a free one */
  port: number;
  host?: string;
  log: Logger;
  /** internal secret that signs caller contexts */
  secret: string;
  /** bearer token of the management API */
  operatorToken: string;
  /** PostgreSQL URL for the gateway's schema; unset means embedded PGlite in dataDir */
  databaseUrl?: string;
  dataDir: string;
  /** connections of the gateway's pool (DATABASE_POOL_SIZE; default 10) */
  poolSize?: number;
  /** named statements for repeated texts (DATABASE_PREPARED_STATEMENTS) */
  preparedStatements?: boolean;
  /** PostgreSQL itself when databaseUrl is a pooler: where migrations run (DATABASE_DIRECT_URL) */
  directDatabaseUrl?: string;
  /** Redis for rate counters shared across replicas; unset means in-memory counters */
  redisUrl?: string;
  bus: Bus;
  /** gRPC address by service name (identity, notebook, audit, ...) */
  services: Record<string, string>;
  /** how long a resolved token is cached (default 30 s) */
  tokenCacheTtlMs?: number;
  /** how long stop() lets in-flight requests finish (default 10 s) */
  shutdownGraceMs?: number;
  /**
   * The services run in this same process (standalone): client-streaming calls
   * (raw file uploads) hand their messages to the service directly, not over gRPC.
   */
  inProcessCalls?: boolean;
  /** realtime streams of one organisation on this gateway (default MAX_STREAMS_PER_ORG) */
  realtimeMaxStreamsPerOrg?: number;
  /** proxies trusted to name the client (LAB_TRUST_PROXY; default none) */
  trustProxy?: TrustProxy;
  /** prefix of the rate-limit counters in Redis (LAB_RATE_LIMIT_PREFIX): one per deployment sharing a Redis */
  rateLimitPrefix?: string;
  /**
   * How client ID metadata documents of MCP clients are fetched: private networks
   * (LAB_MCP_CLIENT_DOCUMENTS_ALLOW_PRIVATE_NETWORKS) and an extra CA
   * (LAB_MCP_CLIENT_DOCUMENTS_CA_FILE) are for tests and local clients only
   */
  clientDocuments?: ClientDocumentOptions;
}

export interface RunningGateway {
  port: number;
  url: string;
  /** database (refusals of keyed requests) and bus (cache invalidation) behind /readyz, and `serving` (false once drain() was called) */
  readiness: Readiness;
  /** the HTTP listener (tests reach its events through it) */
  server: Server;
  /**
   * The first step of a stop behind a balancer: /readyz turns 503 and every
   * answer from now on closes its connection (`Connection: close`), so clients
   * reconnect, through the balancer, to another replica; requests are still served
   * until stop() closes the listener.
   */
  drain(): void;
  stop(): Promise<void>;
}

const PURGE_EVERY_MS = 60 * 60_000;

/** Starts the HTTP edge: schema, caches, cache invalidation, then the listener. */
export async function startGateway(opts: GatewayOptions): Promise<RunningGateway> {
  const log = opts.log.child({ svc: 'gateway' });
  const db = await openDatabase({
    url: opts.databaseUrl,
    dataDir: opts.dataDir,
    name: 'gateway',
    poolSize: opts.poolSize,
    preparedStatements: opts.preparedStatements,
  });
  const applied = await migrate(db, 'gateway', join(__dirname, '..', 'migrations'), { url: opts.directDatabaseUrl, name: 'gateway-migrate' });
  if (applied.length) log.info({ applied }, 'migrations applied');

  // a peer away: one line as it goes, one as it is back (each 5xx has its own line too)
  const clients = new Clients(opts.services, opts.secret, opts.inProcessCalls, new OutageLog(log));
  const cache = new PrincipalCache(opts.tokenCacheTtlMs ?? 30_000);
  const auth = new Authenticator(clients, cache, opts.operatorToken);
  const limiter = new RateLimiter(log, opts.redisUrl, opts.rateLimitPrefix);
  const idempotency = new KeyedRefusals(db);
  const answered = new AnsweredKeys();

  await opts.bus.subscribe({
    queue: 'gateway.identity-cache',
    transient: true,
    bindings: ['identity.#'],
    handler: async (msg) => invalidateFromEvent(cache, msg.type, msg.data),
  });

  const jobEvents = new JobEventsHub(log, { maxPerOrg: opts.realtimeMaxStreamsPerOrg });
  await jobEvents.subscribe(opts.bus);

  const purge = new Housekeeping([['refusals of keyed requests', () => idempotency.purgeExpired()]], log, { everyMs: PURGE_EVERY_MS, firstMs: PURGE_EVERY_MS });
  purge.start();

  if (opts.clientDocuments?.allowPrivateNetworks) log.warn('client metadata documents may be fetched from private and loopback addresses');
  const functions = functionsHost({ log, clients, auth, limiter }, new StateSigner(oauthStateKey(opts.secret)), new ClientDocuments(opts.clientDocuments));
  const app = createApp({ log, clients, auth, limiter, idempotency, answered, jobEvents, functions });
  app.set('trust proxy', opts.trustProxy ?? false);
  const server: Server = createServer(app);
  let draining = false;
  // before the app's listener, so the header is set before any answer is begun
  server.prependListener('request', (_req, res) => {
    if (draining) res.setHeader('Connection', 'close');
  });
  answerClientErrorsWithEnvelope(server);
  await listenLogged(server, opts.port, opts.host ?? '0.0.0.0', (err) => log.error({ err: err.message }, 'http server error'));
  const sockets = new Set<Socket>();
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  const port = (server.address() as AddressInfo).port;
  const host = !opts.host || opts.host === '0.0.0.0' || opts.host === '::' ? '127.0.0.1' : opts.host;
  log.info({ port }, 'gateway listening');

  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      // the answers of requests still in flight close their connections too
      draining = true;
      await purge.stop();
      jobEvents.close();
      // Stop accepting, let in-flight requests finish, then cut what is left.
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      const grace = setTimeout(() => server.closeAllConnections(), opts.shutdownGraceMs ?? 10_000);
      await closed;
      clearTimeout(grace);
      for (const s of sockets) s.destroy();
      clients.close();
      await limiter.close();
      await idempotency.settle();
      await db.close();
    })());

  const dependencies = dependencyReadiness({ db, bus: opts.bus });
  return {
    port,
    url: `http://${host}:${port}`,
    readiness: async () => ({ ...(await dependencies()), serving: !draining }),
    server,
    drain: () => {
      draining = true;
    },
    stop,
  };
}
