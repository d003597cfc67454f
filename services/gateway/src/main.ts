import './tracing.js';
import { z } from 'zod';
import {
  commonEnv,
  createLogger,
  DEFAULT_METRICS_PORT,
  envInt,
  exitOnFailure,
  grpcTarget,
  loadConfig,
  openBus,
  serveOps,
  SHUTDOWN_DRAIN_MS,
  stopOnSignals,
  type Logger,
} from '@lab/kit';
import { realtimeStreamsPerOrgSetting } from '@lab/realtime';
import { clientDocumentsEnv, clientDocumentsOptions } from './client-documents-config.js';
import { startGateway, trustProxySetting } from './index.js';

/** Services the gateway may call, each at `<NAME>_ADDR` (a gRPC target: host:port, dns:///host:port, ipv4:a:p,b:p). */
const SERVICES = ['identity', 'notebook', 'audit', 'inventory', 'equipment', 'telemetry', 'orders', 'jobs', 'notifications', 'webhooks'];

const gatewayEnv = commonEnv.extend({
  PORT: envInt(8080, 0, 65535),
  HOST: z.string().default('0.0.0.0'),
  LAB_INTERNAL_SECRET: z.string().min(16, 'must be at least 16 characters'),
  LAB_OPERATOR_TOKEN: z.string().min(16, 'must be at least 16 characters'),
  REDIS_URL: z.string().optional(),
  TOKEN_CACHE_TTL_MS: envInt(30_000, 0, 300_000),
  LAB_REALTIME_MAX_STREAMS_PER_ORG: realtimeStreamsPerOrgSetting,
  LAB_TRUST_PROXY: trustProxySetting,
  LAB_RATE_LIMIT_PREFIX: z
    .string()
    .regex(/^[A-Za-z0-9:._-]{1,100}$/, 'letters, digits and : . _ - only')
    .default('lab:gateway:rl'),
  ...clientDocumentsEnv,
  ...Object.fromEntries(SERVICES.map((s) => [`${s.toUpperCase()}_ADDR`, grpcTarget])),
});

/** The gateway alone in its own process (cluster shape), stopped gracefully on SIGTERM. */
async function main(log: Logger): Promise<void> {
  let cfg: z.infer<typeof gatewayEnv>;
  try {
    cfg = loadConfig(gatewayEnv);
  } catch (err) {
    log.fatal((err as Error).message);
    process.exit(78);
  }
  const env = cfg as unknown as Record<string, string | undefined>;
  const services: Record<string, string> = {};
  for (const s of SERVICES) {
    const a = env[`${s.toUpperCase()}_ADDR`];
    if (a) services[s] = a;
  }
  const bus = await openBus(cfg, log);
  const gw = await startGateway({
    port: cfg.PORT,
    host: cfg.HOST,
    log,
    secret: cfg.LAB_INTERNAL_SECRET,
    operatorToken: cfg.LAB_OPERATOR_TOKEN,
    databaseUrl: cfg.DATABASE_URL,
    dataDir: cfg.LAB_DATA_DIR,
    poolSize: cfg.DATABASE_POOL_SIZE,
    preparedStatements: cfg.DATABASE_PREPARED_STATEMENTS,
    directDatabaseUrl: cfg.DATABASE_DIRECT_URL,
    redisUrl: cfg.REDIS_URL,
    bus,
    services,
    tokenCacheTtlMs: cfg.TOKEN_CACHE_TTL_MS,
    realtimeMaxStreamsPerOrg: cfg.LAB_REALTIME_MAX_STREAMS_PER_ORG,
    trustProxy: cfg.LAB_TRUST_PROXY,
    rateLimitPrefix: cfg.LAB_RATE_LIMIT_PREFIX,
    clientDocuments: clientDocumentsOptions(cfg),
  });
  const ops = await serveOps(cfg.METRICS_PORT ?? DEFAULT_METRICS_PORT, gw.readiness, log, cfg.METRICS_HOST);
  log.info({ port: gw.port, services: Object.keys(services) }, 'gateway ready');
  stopOnSignals(
    log,
    async () => {
      await gw.stop();
      await bus.close();
      ops?.close();
    },
    'stopping',
    { ms: cfg.LAB_SHUTDOWN_DRAIN_MS ?? SHUTDOWN_DRAIN_MS, begin: () => gw.drain() },
  );
}

const log = createLogger('gateway');
exitOnFailure(log, main(log));
