import { webhooks } from '@lab/contracts';
import type { GrpcServer, ServiceDeps } from '@lab/kit';
import type { WebhooksConfig } from './config.js';
import { DeliveryWorker } from './delivery-worker.js';
import { consumeEvents } from './fanout.js';
import { createInboundEndpoint, receiveInbound } from './inbound.js';
import { consumeJobOutcomes } from './job-outcomes.js';
import { createSubscription, listSubscriptionDeliveries } from './management.js';

/** gRPC handlers, the event fan-out, the inbound job outcomes and the delivery worker; returns the stop hook. */
export async function registerWebhooks(server: GrpcServer, deps: ServiceDeps, cfg: WebhooksConfig): Promise<() => Promise<void>> {
  server.add(webhooks.WebhooksServiceService, {
    createSubscription: (req, caller) => createSubscription(deps, caller, req),
    listDeliveries: (req, caller) => listSubscriptionDeliveries(deps, caller, req),
    createInboundEndpoint: (req, caller) => createInboundEndpoint(deps, caller, req),
    receiveInbound: (req, caller) => receiveInbound(deps, caller, req),
  });
  const worker = new DeliveryWorker(deps.db, deps.outbox, cfg, deps.log.child({ component: 'webhook-delivery' }));
  await consumeEvents(deps, () => worker.kick());
  await consumeJobOutcomes(deps);
  worker.start();
  if (cfg.allowPrivateNetworks) deps.log.warn('webhook deliveries may reach private and loopback addresses (LAB_WEBHOOKS_ALLOW_PRIVATE_NETWORKS)');
  return () => worker.stop();
}
