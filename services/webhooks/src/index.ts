import path from 'node:path';
import type { ServiceDefinition } from '@lab/kit';
import { webhooksConfig, type WebhooksConfig } from './config.js';
import { purgeInboundEvents, purgeSettledDeliveries } from './retention.js';
import { registerHandlers } from './server.js';

export type { WebhooksConfig } from './config.js';
export { parseSignatureHeader, signatureHeader, verifySignature } from './signature.js';
export { isInboundAddress } from './inbound.js';
export { DEFAULT_SIGNATURE_SCHEME, SIGNATURE_SCHEMES, type SignatureScheme } from './signature-schemes.js';
export { eventsMarkdown, FILTER_MESSAGE, SUBSCRIBABLE_EVENTS, SUBSCRIBABLE_FILTERS, SUBSCRIBABLE_WILDCARDS } from './event-filters.js';

/**
 * Outbound webhook subscriptions and signed deliveries with retries; inbound
 * endpoints and the events they receive. Configuration is read from the
 * environment when the service starts; `overrides` (tests) win over it.
 */
export function webhooksDefinition(overrides: Partial<WebhooksConfig> = {}): ServiceDefinition {
  // read at start, like every service's environment, and kept for the retention rules
  let config: WebhooksConfig | undefined;
  return {
    name: 'webhooks',
    schema: 'webhooks',
    migrationsDir: path.join(__dirname, '..', 'migrations'),
    register: async (server, deps) => registerHandlers(server, deps, (config = webhooksConfig(overrides))),
    retention: (deps) => [
      ['settled webhook deliveries', () => purgeSettledDeliveries(deps.db, config!.retentionDays)],
      ['inbound webhook events', () => purgeInboundEvents(deps.db, config!.retentionDays)],
    ],
  };
}

export const definition: ServiceDefinition = webhooksDefinition();
