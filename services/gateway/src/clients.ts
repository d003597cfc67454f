import { audit, identity, jobs, notebook, orders, notifications, records, webhooks, telemetry } from '@lab/contracts';
import { DomainError, RpcClient } from '@lab/kit';

export type IdentityClient = RpcClient<typeof identity.IdentityServiceService>;
export type RecordClient = RpcClient<typeof records.RecordServiceService>;
export type NotebookClient = RpcClient<typeof notebook.NotebookServiceService>;
export type AuditClient = RpcClient<typeof audit.AuditServiceService>;
export type OrdersClient = RpcClient<typeof orders.OrdersServiceService>;
export type WebhooksClient = RpcClient<typeof webhooks.WebhooksServiceService>;
export type NotificationsClient = RpcClient<typeof notifications.NotificationsServiceService>;
export type JobsClient = RpcClient<typeof jobs.JobsServiceService>;
export type TelemetryClient = RpcClient<typeof telemetry.TelemetryServiceService>;

/**
 * gRPC clients by service name, created once per (service, contract) and reused.
 * A service missing from the configuration answers 503 service_unavailable.
 */
export class Clients {
  private readonly made = new Map<string, { close(): void }>();

  constructor(
    private readonly addresses: Record<string, string>,
    private readonly secret: string,
  ) {}

  has(service: string): boolean {
    return !!this.addresses[service];
  }

  private get<C extends { close(): void }>(service: string, contract: string, make: (address: string) => C): C {
    const address = this.addresses[service];
    if (!address) throw DomainError.unavailable(`the ${service} service is not available in this deployment`);
    const id = `${service}/${contract}`;
    let c = this.made.get(id) as C | undefined;
    if (!c) {
      c = make(address);
      this.made.set(id, c);
    }
    return c;
  }

  identity(): IdentityClient {
    return this.get('identity', 'identity', (a) => new RpcClient(identity.IdentityServiceClient, a, { secret: this.secret }));
  }

  records(service: string): RecordClient {
    return this.get(service, 'records', (a) => new RpcClient(records.RecordServiceClient, a, { secret: this.secret }));
  }

  notebook(): NotebookClient {
    return this.get('notebook', 'notebook', (a) => new RpcClient(notebook.NotebookServiceClient, a, { secret: this.secret }));
  }

  audit(): AuditClient {
    return this.get('audit', 'audit', (a) => new RpcClient(audit.AuditServiceClient, a, { secret: this.secret }));
  }

  notifications(): NotificationsClient {
    return this.get('notifications', 'notifications', (a) => new RpcClient(notifications.NotificationsServiceClient, a, { secret: this.secret }));
  }

  jobs(): JobsClient {
    return this.get('jobs', 'jobs', (a) => new RpcClient(jobs.JobsServiceClient, a, { secret: this.secret }));
  }

  webhooks(): WebhooksClient {
    return this.get('webhooks', 'webhooks', (a) => new RpcClient(webhooks.WebhooksServiceClient, a, { secret: this.secret }));
  }

  telemetry(): TelemetryClient {
    return this.get('telemetry', 'telemetry', (a) => new RpcClient(telemetry.TelemetryServiceClient, a, { secret: this.secret }));
  }

  orders(): OrdersClient {
    return this.get('orders', 'orders', (a) => new RpcClient(orders.OrdersServiceClient, a, { secret: this.secret }));
  }

  close(): void {
    for (const c of this.made.values()) c.close();
    this.made.clear();
  }
}
