/**
 * Who consumes which events: the durable queues of the deployment and the event
 * types each is bound to. Consumers subscribe with these, and every process's bus
 * declares all of them when it connects, so an event published before its
 * consumer's first start (a first deploy, a broker that lost its definitions) is
 * kept in the queue instead of being confirmed to no one and dropped.
 */
export interface QueueRoute {
  /** the queue's name under the deployment's exchange */
  queue: string;
  bindings: readonly string[];
}

/**
 * Event types webhook subscribers may receive: the public prefixes (spec, Events,
 * and the additions stock_item, environmental, lab_order, lab_result). The events
 * themselves are listed by the webhooks service (SUBSCRIBABLE_EVENTS), which checks
 * that each one has a prefix from here.
 */
export const PUBLIC_EVENT_PREFIXES = ['experiment', 'sample', 'stock_movement', 'stock_item', 'equipment', 'environmental', 'lab_order', 'lab_result'] as const;

export const EVENT_ROUTES = {
  auditRecords: { queue: 'audit.records', bindings: ['audit.record'] },
  // what the record services' committed writes did to the departments they name (identity counts them)
  departmentReferences: { queue: 'identity.department-references', bindings: ['department_ref.changed'] },
  jobRequests: { queue: 'jobs.requests', bindings: ['job.requested'] },
  jobsFromInboundWebhooks: { queue: 'jobs.inbound-webhooks', bindings: ['inbound_webhook.received'] },
  notificationReactions: { queue: 'notifications.reactions', bindings: ['environmental.breach', 'job.updated'] },
  // the delivery fan-out: every public event, nothing else
  webhookDeliveries: { queue: 'webhooks.deliveries', bindings: PUBLIC_EVENT_PREFIXES.map((p) => `${p}.#`) },
  webhookInboundJobOutcomes: { queue: 'webhooks.inbound-jobs', bindings: ['inbound_webhook.job_created', 'inbound_webhook.job_rejected'] },
} as const satisfies Record<string, QueueRoute>;

/**
 * Event types published to RabbitMQ in bundles (binding patterns): the messages of
 * such a type in one relay batch go as one AMQP message (kit's
 * BUNDLE_CONTENT_TYPE); consumers still get one message each. Audit records: one
 * beside every change, stored in batches by their one consumer. The public events
 * (decision 068): one beside every write too, and their consumers, the webhook
 * fan-out and, for breaches, notification reactions, take a batch in one
 * transaction; RabbitMQ's cost is per AMQP message, so a keyed write's share of
 * it halves. Breach events come in bursts of an ingest batch's size (decision
 * 035). The other events go alone: their consumers (a job worker, a department
 * count) handle each at their own pace and prefetch.
 */
export const BUNDLED_EVENT_TYPES: readonly string[] = ['audit.record', ...EVENT_ROUTES.webhookDeliveries.bindings];

/** Every durable queue, for a bus to declare when it connects. */
export const DURABLE_QUEUES: readonly QueueRoute[] = Object.values(EVENT_ROUTES);
