import {
  audit,
  equipmentCalendar,
  identity,
  jobs,
  notebook,
  notifications,
  orders,
  outbox,
  records,
  recordsWire,
  telemetry,
  telemetryWire,
  webhooks,
} from '@lab/contracts';
import { DomainError, RpcClient, type OutageLog, type RpcClientOptions } from '@lab/kit';

export type IdentityClient = RpcClient<typeof identity.IdentityServiceService>;
export type RecordClient = RpcClient<typeof records.RecordServiceService>;
export type NotebookClient = RpcClient<typeof notebook.NotebookServiceService>;
export type AuditClient = RpcClient<typeof audit.AuditServiceService>;
export type OrdersClient = RpcClient<typeof orders.OrdersServiceService>;
export type WebhooksClient = RpcClient<typeof webhooks.WebhooksServiceService>;
export type NotificationsClient = RpcClient<typeof notifications.NotificationsServiceService>;
export type JobsClient = RpcClient<typeof jobs.JobsServiceService>;
export type TelemetryClient = RpcClient<typeof telemetry.TelemetryServiceService>;
export type EquipmentCalendarClient = RpcClient<typeof equipmentCalendar.EquipmentCalendarServiceService>;
export type DeadLetterClient = RpcClient<typeof outbox.DeadLetterServiceService>;

/**
 * gRPC clients by service name, created once per (service, contract) and reused.
 * A service missing from the configuration answers 503 service_unavailable.
 */
export class Clients {
  private readonly made = new Map<string, { close(): void }>();

  private readonly opts: RpcClientOptions;

  /**
   * inProcess: client-streaming calls to services of this process skip gRPC (standalone);
   * outages: where a peer's outages are logged (once as it starts, once as it ends)
   */
  constructor(
    private readonly addresses: Record<string, string>,
    secret: string,
    inProcess = false,
    outages?: OutageLog,
  ) {
    this.opts = { secret, inProcess, outages };
  }

  has(service: string): boolean {
    return !!this.addresses[service];
  }

  /** Names of the services this deployment has, in the configuration's order. */
  names(): string[] {
    return Object.keys(this.addresses).filter((s) => !!this.addresses[s]);
  }

  private get<C extends { close(): void }>(service: string, contract: string, make: (address: string, opts: RpcClientOptions) => C): C {
    const address = this.addresses[service];
    if (!address) throw DomainError.unavailable(`the ${service} service is not available in this deployment`);
    const id = `${service}/${contract}`;
    let c = this.made.get(id) as C | undefined;
    if (!c) {
      // every contract of a service shares its name in the outage log
      c = make(address, { ...this.opts, peer: service });
      this.made.set(id, c);
    }
    return c;
  }

  identity(): IdentityClient {
    return this.get('identity', 'identity', (a, o) => new RpcClient(identity.IdentityServiceClient, a, o));
  }

  records(service: string): RecordClient {
    // a token's concurrent reads of records by id go as one call per turn (call-batches.ts)
    return this.get(service, 'records', (a, o) => new RpcClient(recordsWire.Client, a, { ...o, batched: ['getRecord'] }));
  }

  notebook(): NotebookClient {
    return this.get('notebook', 'notebook', (a, o) => new RpcClient(notebook.NotebookServiceClient, a, o));
  }

  audit(): AuditClient {
    return this.get('audit', 'audit', (a, o) => new RpcClient(audit.AuditServiceClient, a, o));
  }

  notifications(): NotificationsClient {
    return this.get('notifications', 'notifications', (a, o) => new RpcClient(notifications.NotificationsServiceClient, a, o));
  }

  jobs(): JobsClient {
    return this.get('jobs', 'jobs', (a, o) => new RpcClient(jobs.JobsServiceClient, a, o));
  }

  webhooks(): WebhooksClient {
    return this.get('webhooks', 'webhooks', (a, o) => new RpcClient(webhooks.WebhooksServiceClient, a, o));
  }

  telemetry(): TelemetryClient {
    return this.get('telemetry', 'telemetry', (a, o) => new RpcClient(telemetryWire.Client, a, o));
  }

  orders(): OrdersClient {
    return this.get('orders', 'orders', (a, o) => new RpcClient(orders.OrdersServiceClient, a, o));
  }

  /** Calendar feeds of equipment and what they show (decision 060). */
  equipmentCalendar(): EquipmentCalendarClient {
    return this.get('equipment', 'calendar', (a, o) => new RpcClient(equipmentCalendar.EquipmentCalendarServiceClient, a, o));
  }

  /** The dead letters of a service's outbox (every service serves them). */
  deadLetters(service: string): DeadLetterClient {
    return this.get(service, 'dead-letters', (a, o) => new RpcClient(outbox.DeadLetterServiceClient, a, o));
  }

  close(): void {
    for (const c of this.made.values()) c.close();
    this.made.clear();
  }
}
