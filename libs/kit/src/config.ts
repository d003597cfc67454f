import { z } from 'zod';
import { BUS_QUEUE_TYPES } from './bus.js';

/**
 * Reads the environment once through a zod schema and fails fast, naming every
 * variable that is wrong, before the process opens any connection.
 */
export function loadConfig<S extends z.ZodType>(schema: S, env: NodeJS.ProcessEnv = process.env): z.infer<S> {
  const parsed = schema.safeParse(env);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${i.path.join('.') || '(env)'}: ${i.message}`);
    throw new ConfigError(`invalid configuration:\n${lines.join('\n')}`);
  }
  return parsed.data;
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** Boolean env flags: only "true"/"1" enable, anything else (or unset) is false. */
export const envFlag = z
  .string()
  .optional()
  .transform((v) => v === 'true' || v === '1');

export const envInt = (def: number, min = 0, max = Number.MAX_SAFE_INTEGER) => z.coerce.number().int().min(min).max(max).default(def);

/** Settings every service process shares. */
export const commonEnv = z.object({
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  /** PostgreSQL URL of this service's database; unset means embedded PGlite. */
  DATABASE_URL: z.url().optional(),
  DATABASE_POOL_SIZE: envInt(10, 1, 200),
  /**
   * Repeated statements as named (prepared) statements: "false" behind a
   * transaction-mode pooler without protocol-level prepared statements
   * (PgBouncer before 1.21), where a name prepared on one server connection is
   * unknown to the next transaction's (db.ts).
   */
  DATABASE_PREPARED_STATEMENTS: z
    .enum(['true', 'false'], { error: 'must be "true" or "false"' })
    .default('true')
    .transform((v) => v === 'true'),
  /**
   * PostgreSQL itself when DATABASE_URL is a pooler: migrations run there, on
   * one connection of their own (db.ts migrate). Unset: DATABASE_URL.
   */
  DATABASE_DIRECT_URL: z.url().optional(),
  /** RabbitMQ URL; unset means the in-process bus (standalone mode only). */
  AMQP_URL: z.string().optional(),
  /** Topic exchange for domain and audit events. */
  LAB_EVENTS_EXCHANGE: z.string().min(1).default('lab.events'),
  /**
   * Durable queues left without a consumer this long are deleted by RabbitMQ (0:
   * never). For short-lived deployments (test and benchmark clusters) only: in
   * production a queue keeps its events until its consumer comes.
   */
  LAB_BUS_QUEUE_EXPIRES_MS: envInt(0, 0, 2_147_483_647),
  /**
   * RabbitMQ type of the durable queues: quorum (replicated across the cluster's
   * nodes) or classic (one node; for a single-node broker). The same in every
   * process; a queue that exists as the other type is used as it is, with a warning.
   */
  LAB_BUS_QUEUE_TYPE: z.enum(BUS_QUEUE_TYPES).default('quorum'),
  /** HMAC secret that signs the caller context the gateway passes to services. */
  LAB_INTERNAL_SECRET: z.string().min(16, 'must be at least 16 characters').optional(),
  LAB_DATA_DIR: z.string().default('./data'),
  /**
   * How long a stopping process (SIGTERM) keeps publishing its outbox backlog, in
   * ms, for all its services together; what is left stays in the outbox for the
   * next start. Keep it well inside the pod's termination grace period (the
   * chart's 30 s), which must also cover finishing in-flight calls.
   */
  LAB_OUTBOX_STOP_FLUSH_MS: envInt(5_000, 0, 600_000),
  /**
   * How long a stopping process (the first SIGTERM or SIGINT) keeps serving,
   * unready, before it closes its listeners: the time its balancers (an ingress
   * controller, kube-proxy, the callers' DNS) take to stop sending to it. Unset:
   * SHUTDOWN_DRAIN_MS in a cluster process, 0 in the embedded one (nothing in
   * front of it). A second signal ends the wait (main.ts stopOnSignals).
   */
  LAB_SHUTDOWN_DRAIN_MS: z.coerce.number().int().min(0).max(600_000).optional(),
  METRICS_PORT: z.coerce.number().int().min(0).max(65535).optional(),
  /** address the operations port binds (every interface by default, as in a pod) */
  METRICS_HOST: z.string().min(1).default('0.0.0.0'),
});
export type CommonEnv = z.infer<typeof commonEnv>;
