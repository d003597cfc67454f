import { rm } from 'node:fs/promises';
import { connect, type ChannelModel } from 'amqplib';
import {
  AmqpBus,
  MemoryBus,
  messagesIn,
  createLogger,
  newId,
  runService,
  type Bus,
  type BusMessage,
  type PeerAddresses,
  type RunningService,
  type ServiceDefinition,
} from '@lab/kit';
import { dropFreshDatabases, freshDatabaseUrl, uniqueExchange } from './backing.js';
import { deleteRunQueues } from './queues.js';

export const TEST_SECRET = 'test-secret-0123456789';

/**
 * Events as a subscriber sees them: on RabbitMQ an independent consumer with its
 * own exclusive queue bound to the exchange (so the test observes the broker, not
 * our code), on the in-process bus a subscription.
 */
export interface EventTap {
  readonly received: BusMessage[];
  close(): Promise<void>;
}

export async function tapEvents(bus: Bus, exchange: string, bindings: string[]): Promise<EventTap> {
  const received: BusMessage[] = [];
  const amqpUrl = process.env.AMQP_URL;
  if (!amqpUrl || bus instanceof MemoryBus) {
    await bus.subscribe({ queue: `tap-${newId()}`, bindings, handler: async (m) => void received.push(m) });
    return { received, close: async () => undefined };
  }
  const conn: ChannelModel = await connect(amqpUrl);
  const ch = await conn.createChannel();
  await ch.assertExchange(exchange, 'topic', { durable: true });
  const q = await ch.assertQueue('', { exclusive: true });
  for (const b of bindings) await ch.bindQueue(q.queue, exchange, b);
  // audit records and public events may come in bundles: messagesIn reads either
  await ch.consume(q.queue, (m) => m && received.push(...messagesIn(m)), { noAck: true });
  return { received, close: () => conn.close() };
}

/** RabbitMQ on the given exchange when AMQP_URL is set (queues expire when idle), else the in-process bus. */
export async function testBus(exchange: string): Promise<Bus> {
  const log = createLogger('test', 'silent');
  return process.env.AMQP_URL ? AmqpBus.connect(process.env.AMQP_URL, exchange, log, { queueExpiresMs: 600_000 }) : new MemoryBus(log);
}

export interface TestService {
  svc: RunningService;
  bus: Bus;
  exchange: string;
  events: EventTap;
  secret: string;
  /** the service's database (undefined on PGlite) */
  databaseUrl: string | undefined;
  stop(): Promise<void>;
}

/**
 * One service over real PostgreSQL and RabbitMQ (a fresh database, its own
 * exchange) when DATABASE_URL / AMQP_URL are set, else on PGlite and the
 * in-process bus; with an event tap bound before the service starts.
 */
export async function startTestService(
  definition: ServiceDefinition,
  opts: { bindings?: string[]; peers?: PeerAddresses; poolSize?: number } = {},
): Promise<TestService> {
  const log = createLogger('test', 'silent');
  const exchange = uniqueExchange();
  const bus = await testBus(exchange);
  const events = await tapEvents(bus, exchange, opts.bindings ?? ['#']);
  const dataDir = `/tmp/lab-${definition.name}-${newId()}`;
  const databaseUrl = await freshDatabaseUrl();
  const svc = await runService(definition, {
    log,
    bus,
    secret: TEST_SECRET,
    databaseUrl,
    dataDir,
    grpcAddress: '127.0.0.1:0',
    poolSize: opts.poolSize ?? 10,
    peers: opts.peers,
  });
  return {
    svc,
    bus,
    exchange,
    events,
    secret: TEST_SECRET,
    databaseUrl,
    stop: async () => {
      await svc.stop();
      await events.close();
      await bus.close();
      if (process.env.AMQP_URL) await deleteRunQueues(process.env.AMQP_URL, exchange);
      await dropFreshDatabases();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
