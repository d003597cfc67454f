import { z } from 'zod';
import { envFlag, envInt, loadConfig } from '@lab/kit';

/** Everything the webhooks service can be tuned with; tests pass overrides. */
export interface WebhooksConfig {
  /** lets deliveries reach loopback and private addresses (tests, local receivers) */
  allowPrivateNetworks: boolean;
  /** delays before attempts 2, 3, ...; attempts in total = maxAttempts */
  retryDelaysMs: number[];
  maxAttempts: number;
  /** per-request timeout of one delivery attempt */
  timeoutMs: number;
  /** deliveries in flight per process */
  concurrency: number;
  /** deliveries in flight per receiver host, so one slow receiver cannot hold the pool */
  perHostConcurrency: number;
  /** fallback poll of due deliveries (a consumed event kicks the worker at once) */
  pollMs: number;
  /** a subscription whose deliveries have all failed for this long ... */
  disableAfterMs: number;
  /** ... with at least this many failed deliveries is disabled */
  disableMinFailures: number;
  /** settled deliveries and inbound events are kept this many days (retention.ts) */
  retentionDays: number;
}

const delays = z
  .string()
  .regex(/^\d+(,\d+)*$/, 'comma-separated milliseconds')
  .transform((s) => s.split(',').map(Number))
  .optional();

const env = z.object({
  LAB_WEBHOOKS_ALLOW_PRIVATE_NETWORKS: envFlag,
  LAB_WEBHOOKS_RETRY_DELAYS_MS: delays,
  LAB_WEBHOOKS_MAX_ATTEMPTS: envInt(5, 1, 20),
  LAB_WEBHOOKS_TIMEOUT_MS: envInt(10_000, 100, 120_000),
  LAB_WEBHOOKS_CONCURRENCY: envInt(16, 1, 512),
  LAB_WEBHOOKS_PER_HOST_CONCURRENCY: envInt(4, 1, 512),
  LAB_WEBHOOKS_POLL_MS: envInt(1_000, 10, 60_000),
  LAB_WEBHOOKS_DISABLE_AFTER_MS: envInt(24 * 3600_000, 0),
  LAB_WEBHOOKS_DISABLE_MIN_FAILURES: envInt(10, 1),
  LAB_WEBHOOKS_RETENTION_DAYS: envInt(30, 1, 3650),
});

/** 10 s, 30 s, 2 min, 10 min: five attempts spread over about 13 minutes. */
const DEFAULT_RETRY_DELAYS_MS = [10_000, 30_000, 120_000, 600_000];

/** The configuration from the environment, read when the service starts, with overrides on top. */
export function webhooksConfig(overrides: Partial<WebhooksConfig> = {}, source: NodeJS.ProcessEnv = process.env): WebhooksConfig {
  const e = loadConfig(env, source);
  return {
    allowPrivateNetworks: e.LAB_WEBHOOKS_ALLOW_PRIVATE_NETWORKS,
    retryDelaysMs: e.LAB_WEBHOOKS_RETRY_DELAYS_MS ?? DEFAULT_RETRY_DELAYS_MS,
    maxAttempts: e.LAB_WEBHOOKS_MAX_ATTEMPTS,
    timeoutMs: e.LAB_WEBHOOKS_TIMEOUT_MS,
    concurrency: e.LAB_WEBHOOKS_CONCURRENCY,
    perHostConcurrency: e.LAB_WEBHOOKS_PER_HOST_CONCURRENCY,
    pollMs: e.LAB_WEBHOOKS_POLL_MS,
    disableAfterMs: e.LAB_WEBHOOKS_DISABLE_AFTER_MS,
    disableMinFailures: e.LAB_WEBHOOKS_DISABLE_MIN_FAILURES,
    retentionDays: e.LAB_WEBHOOKS_RETENTION_DAYS,
    ...overrides,
  };
}

/**
 * Delay before the next attempt after `attempts` attempts: the configured step
 * (the last one repeats) with +-20 % jitter, so receivers recovering from an
 * outage are not hit by every delivery at once.
 */
export function retryDelay(cfg: WebhooksConfig, attempts: number): number {
  const steps = cfg.retryDelaysMs.length ? cfg.retryDelaysMs : DEFAULT_RETRY_DELAYS_MS;
  const base = steps[Math.min(attempts - 1, steps.length - 1)]!;
  return Math.round(base * (0.8 + Math.random() * 0.4));
}
