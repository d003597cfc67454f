import path from 'node:path';
import type { ServiceDefinition } from '@lab/kit';
import { webhooksConfig, type WebhooksConfig } from './config.js';
import { purgeExpired } from './retention.js';
import { registerWebhooks } from './server.js';

export type { WebhooksConfig } from './config.js';
export { parseSignatureHeader, signatureHeader, verifySignature } from './signature.js';
export { isInboundAddress } from './inbound.js';

/**
 * Outbound webhook subscriptions and signed deliveries with retries; inbound
 * endpoints and the events they receive. Configuration is read from the
 * environment when the service starts; `overrides` (tests) win over it.
 */
export function webhooksDefinition(overrides: Partial<WebhooksConfig> = {}): ServiceDefinition {
  // read at start, like every service's environment, and kept for housekeeping
  let config: WebhooksConfig | undefined;
  return {
    name: 'webhooks',
    schema: 'webhooks',
    migrationsDir: path.join(__dirname, '..', 'migrations'),
    register: async (server, deps) => registerWebhooks(server, deps, (config = webhooksConfig(overrides))),
    housekeeping: async (deps) => {
      if (!config) return;
      const gone = await purgeExpired(deps.db, config.retentionDays);
      if (gone.deliveries || gone.inbound_events) deps.log.info(gone, 'expired webhook history removed');
    },
  };
}

export const definition: ServiceDefinition = webhooksDefinition();
