import { z } from 'zod';
import {
  commonEnv,
  DEFAULT_METRICS_PORT,
  envFlag,
  heldUntilOpen,
  openBus,
  randomToken,
  runService,
  serveOps,
  type Logger,
  type RunningService,
} from '@lab/kit';
import { clientDocumentsEnv, clientDocumentsOptions, startGateway, trustProxySetting } from '@lab/gateway';
import { realtimeStreamsPerOrgSetting } from '@lab/realtime';
import { serviceDefinitions } from './services.js';
import { operatorToken } from './operator-token.js';

export const standaloneEnv = commonEnv.extend({
  PORT: z.coerce.number().int().min(0).max(65535).default(8080),
  HOST: z.string().default('0.0.0.0'),
  LAB_OPERATOR_TOKEN: z.string().min(16, 'must be at least 16 characters').optional(),
  REDIS_URL: z.string().optional(),
  LAB_WEBHOOKS_ALLOW_PRIVATE_NETWORKS: envFlag,
  LAB_REALTIME_MAX_STREAMS_PER_ORG: realtimeStreamsPerOrgSetting,
  LAB_TRUST_PROXY: trustProxySetting,
  LAB_RATE_LIMIT_PREFIX: z
    .string()
    .regex(/^[A-Za-z0-9:._-]{1,100}$/, 'letters, digits and : . _ - only')
    .default('lab:gateway:rl'),
  ...clientDocumentsEnv,
});
export type StandaloneConfig = z.infer<typeof standaloneEnv>;

export interface Standalone {
  url: string;
  port: number;
  operatorToken: string;
  operatorTokenFile?: string;
  services: RunningService[];
  /** turns every component unready while all go on serving (RunningGateway.drain, RunningService.drain) */
  drain(): void;
  stop(): Promise<void>;
}

/**
 * Every service in one process. They still talk gRPC over loopback, each with its
 * own schema and outbox, so this is the cluster's code path in one box: embedded
 * PostgreSQL (PGlite) and the in-process bus unless DATABASE_URL / AMQP_URL say
 * otherwise.
 */
export async function startStandalone(cfg: StandaloneConfig, log: Logger): Promise<Standalone> {
  // Services and gateway share the process, so a fresh internal secret per start suffices.
  const secret = cfg.LAB_INTERNAL_SECRET ?? randomToken(32);
  // publishes wait until every service has subscribed (heldUntilOpen)
  const bus = heldUntilOpen(await openBus(cfg, log));
  const services: RunningService[] = [];
  try {
    for (const def of serviceDefinitions) {
      services.push(
        await runService(def, {
          log,
          bus,
          secret,
          databaseUrl: cfg.DATABASE_URL,
          dataDir: cfg.LAB_DATA_DIR,
          poolSize: cfg.DATABASE_POOL_SIZE,
          preparedStatements: cfg.DATABASE_PREPARED_STATEMENTS,
          directDatabaseUrl: cfg.DATABASE_DIRECT_URL,
          grpcAddress: '127.0.0.1:0',
          peers: (peer) => services.find((s) => s.name === peer)?.address,
        }),
      );
    }
    const op = await operatorToken(cfg.LAB_OPERATOR_TOKEN, cfg.LAB_DATA_DIR);
    const gateway = await startGateway({
      port: cfg.PORT,
      host: cfg.HOST,
      log,
      secret,
      operatorToken: op.token,
      databaseUrl: cfg.DATABASE_URL,
      dataDir: cfg.LAB_DATA_DIR,
      poolSize: cfg.DATABASE_POOL_SIZE,
      preparedStatements: cfg.DATABASE_PREPARED_STATEMENTS,
      directDatabaseUrl: cfg.DATABASE_DIRECT_URL,
      redisUrl: cfg.REDIS_URL,
      bus,
      services: Object.fromEntries(services.map((s) => [s.name, s.address])),
      // one process: uploads reach the telemetry service without a gRPC hop
      inProcessCalls: true,
      realtimeMaxStreamsPerOrg: cfg.LAB_REALTIME_MAX_STREAMS_PER_ORG,
      trustProxy: cfg.LAB_TRUST_PROXY,
      rateLimitPrefix: cfg.LAB_RATE_LIMIT_PREFIX,
      clientDocuments: clientDocumentsOptions(cfg),
    });
    // every consumer has subscribed: events (a backlog from before a restart first) may flow
    bus.open();
    // One operations port for the whole process: /metrics, /livez, and /readyz
    // answering for every service's database and the bus. METRICS_PORT=0 turns it off.
    const ops = await serveOps(
      cfg.METRICS_PORT ?? DEFAULT_METRICS_PORT,
      async () => {
        const named = [{ name: 'gateway', readiness: gateway.readiness }, ...services];
        const results = await Promise.all(named.map((s) => s.readiness()));
        const checks: Record<string, boolean> = {};
        results.forEach((r, i) => {
          for (const [k, ok] of Object.entries(r)) checks[`${named[i]!.name}.${k}`] = ok;
        });
        return checks;
      },
      log,
      cfg.METRICS_HOST,
    );
    return {
      url: gateway.url,
      port: gateway.port,
      operatorToken: op.token,
      operatorTokenFile: op.file,
      services,
      drain: () => {
        gateway.drain();
        for (const s of services) s.drain();
      },
      stop: async () => {
        ops?.close();
        await gateway.stop();
        // Every outbox at once, with one deadline for all, while every consumer is
        // still there; what is left stays for the next start.
        const deadline = Date.now() + cfg.LAB_OUTBOX_STOP_FLUSH_MS;
        await Promise.all(services.map((s) => s.flushOutbox(deadline)));
        // Reverse order: the gateway's callers first, identity last.
        for (const s of [...services].reverse()) await s.stop(deadline);
        await bus.close();
      },
    };
  } catch (err) {
    // stopping services flush their outboxes: publishes must not wait for an open that will not come
    bus.open();
    const deadline = Date.now() + cfg.LAB_OUTBOX_STOP_FLUSH_MS;
    for (const s of services.reverse()) await s.stop(deadline).catch(() => undefined);
    await bus.close();
    throw err;
  }
}
