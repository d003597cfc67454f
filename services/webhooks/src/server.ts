import { webhooks } from '@lab/contracts';
import type { GrpcServer, ServiceDeps } from '@lab/kit';
import type { WebhooksConfig } from './config.js';
import { DeliveryWorker } from './delivery-worker.js';
import { consumeEvents } from './fanout.js';
import { createInboundEndpoint, receiveInbound } from './inbound.js';
import { consumeJobOutcomes } from './job-outcomes.js';
import { deleteInboundEndpoint, getInboundEndpoint, listInboundEndpoints, rotateInboundSecret, updateInboundEndpoint } from './inbound-endpoints.js';
import { createSubscription, listSubscriptionDeliveries } from './management.js';
import { assertPublicReceiver } from './receiver-guard.js';
import { deleteSubscription, getSubscription, listSubscriptions, redeliver, rotateSubscriptionSecret, updateSubscription } from './subscriptions.js';

/** gRPC handlers, the event fan-out, the inbound job outcomes and the delivery worker; returns the stop hook. */
export async function registerHandlers(server: GrpcServer, deps: ServiceDeps, cfg: WebhooksConfig): Promise<() => Promise<void>> {
  server.add(webhooks.WebhooksServiceService, {
    createSubscription: async (req, caller) => {
      await assertPublicReceiver(req.url, cfg.allowPrivateNetworks);
      return createSubscription(deps, caller, req);
    },
    listDeliveries: (req, caller) => listSubscriptionDeliveries(deps, caller, req),
    createInboundEndpoint: (req, caller) => createInboundEndpoint(deps, caller, req),
    receiveInbound: (req, caller) => receiveInbound(deps, caller, req),
    listSubscriptions: (req, caller) => listSubscriptions(deps, caller, req),
    getSubscription: (req, caller) => getSubscription(deps, caller, req),
    updateSubscription: async (req, caller) => {
      if (req.url !== undefined) await assertPublicReceiver(req.url, cfg.allowPrivateNetworks);
      return updateSubscription(deps, caller, req);
    },
    deleteSubscription: (req, caller) => deleteSubscription(deps, caller, req),
    rotateSubscriptionSecret: (req, caller) => rotateSubscriptionSecret(deps, caller, req),
    redeliver: async (req, caller) => {
      const r = await redeliver(deps, caller, req);
      // due now: the worker need not wait for its poll
      worker.kick();
      return r;
    },
    listInboundEndpoints: (req, caller) => listInboundEndpoints(deps, caller, req),
    getInboundEndpoint: (req, caller) => getInboundEndpoint(deps, caller, req),
    updateInboundEndpoint: (req, caller) => updateInboundEndpoint(deps, caller, req),
    deleteInboundEndpoint: (req, caller) => deleteInboundEndpoint(deps, caller, req),
    rotateInboundSecret: (req, caller) => rotateInboundSecret(deps, caller, req),
  });
  const worker = new DeliveryWorker(deps.db, deps.outbox, cfg, deps.log.child({ component: 'webhook-delivery' }));
  await consumeEvents(deps, () => worker.kick());
  await consumeJobOutcomes(deps);
  worker.start();
  if (cfg.allowPrivateNetworks) deps.log.warn('webhook deliveries may reach private and loopback addresses (LAB_WEBHOOKS_ALLOW_PRIVATE_NETWORKS)');
  return () => worker.stop();
}
