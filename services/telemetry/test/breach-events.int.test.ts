import { rm } from 'node:fs/promises';
import { BUNDLED_EVENT_TYPES, EVENT_ROUTES, jsonString, telemetryItemJson, telemetryWire, type telemetry } from '@lab/contracts';
import { AmqpBus, MemoryBus, RpcClient, createLogger, newId, runService, type Bus, type BusMessage, type CallerContext, type RunningService } from '@lab/kit';
import { telemetryDefinition } from '@lab/telemetry';
import { TEST_SECRET, dropFreshDatabases, freshDatabaseUrl, uniqueExchange, waitFor } from '@lab/testing';
import { deleteRunQueues } from '@lab/testing/queues';

// The breach events of ingest batches as their subscribers get them, on a bus set
// up as the deployment's (environmental.breach bundled on RabbitMQ): the webhook
// fan-out and the notification reactions, each on its queue and bindings. A batch's
// events are one outbox row; each subscriber must still get one event per breaching
// reading, none lost and none twice.
const log = createLogger('test', 'silent');
const amqpUrl = process.env.AMQP_URL;
const exchange = uniqueExchange();
const dataDir = `/tmp/lab-telemetry-${newId()}`;
let bus: Bus;
let subscribers: Bus;
let svc: RunningService;
let rpc: RpcClient<typeof telemetry.TelemetryServiceService>;
/** what each subscriber got, by queue */
const got = new Map<string, BusMessage[]>();

const bundled = (): Promise<Bus> =>
  AmqpBus.connect(amqpUrl!, exchange, log, { queueExpiresMs: 600_000, bundledTypes: BUNDLED_EVENT_TYPES, queueType: 'classic' });

beforeAll(async () => {
  bus = amqpUrl ? await bundled() : new MemoryBus(log);
  // consumers in another process read from the broker; in process, the same bus
  subscribers = amqpUrl ? await bundled() : bus;
  for (const route of [EVENT_ROUTES.webhookDeliveries, EVENT_ROUTES.notificationReactions]) {
    const seen: BusMessage[] = [];
    got.set(route.queue, seen);
    const take = (m: BusMessage) => {
      if (m.type === 'environmental.breach') seen.push(m);
    };
    // the webhook fan-out takes bundles whole (handleBatch), the reactions one by one
    await subscribers.subscribe({
      queue: route.queue,
      bindings: route.bindings,
      handler: async (m) => take(m),
      ...(route === EVENT_ROUTES.webhookDeliveries ? { handleBatch: async (ms: BusMessage[]) => ms.forEach(take) } : {}),
    });
  }
  svc = await runService(telemetryDefinition(), {
    log,
    bus,
    secret: TEST_SECRET,
    databaseUrl: await freshDatabaseUrl(),
    dataDir,
    grpcAddress: '127.0.0.1:0',
    poolSize: 10,
  });
  rpc = new RpcClient(telemetryWire.Client, svc.address, { secret: TEST_SECRET });
});

afterAll(async () => {
  rpc?.close();
  await svc?.stop();
  if (subscribers !== bus) await subscribers?.close();
  await bus?.close();
  if (amqpUrl) await deleteRunQueues(amqpUrl, exchange);
  await dropFreshDatabases();
  await rm(dataDir, { recursive: true, force: true });
});

type Json = Record<string, any>;

it('a batch with many breaches gives each subscriber one event per breaching reading, none lost or twice', async () => {
  const org_id = newId();
  const caller = (scopes: string[], token_kind = 'api_key'): CallerContext => ({
    org_id,
    user_id: null,
    role: null,
    department_id: null,
    scopes,
    token_kind,
    token_id: newId(),
    request_id: newId(),
  });
  const j = (r: telemetry.ItemResponse): Json => JSON.parse(jsonString(telemetryItemJson(r.item))) as Json;
  const points: Json[] = [];
  for (let i = 0; i < 10; i++) {
    const body = { parameter: 'temperature', unit: '°C', external_code: `room-${i}`, limit_min: 2, limit_max: i % 2 ? undefined : 8 };
    points.push(j(await rpc.call('createPoint', { org_id, point_id: '', body }, caller(['*'], 'operator'))));
  }
  // four batches at once: 500 readings, a third breaching (above 8 on even points, the
  // ones with a limit_max, below 2 on odd ones), one batch all breaching
  const batch = (b: number) => ({
    readings: Array.from({ length: 500 }, (_, i) => ({
      external_code: `room-${i % 10}`,
      value: b === 3 || i % 3 === 0 ? (i % 2 ? -1.5 : 12.25) : 4 + (i % 7) / 3,
      ...(i % 5 === 0 ? { unit: 'K' } : {}),
    })),
  });
  const answers = await Promise.all([0, 1, 2, 3].map(async (b) => j(await rpc.call('ingestReadings', { body: batch(b) }, caller(['read', 'write'])))));
  // the answer's readings as the API shows them, each with its point's fields
  const breaching = answers.flatMap((a) => (a.readings as Json[]).filter((r) => r.is_breach));
  expect(answers.map((a) => a.breaches)).toEqual(answers.map((a) => (a.readings as Json[]).filter((r) => r.is_breach).length));
  expect(breaching.length).toBeGreaterThan(800);
  for (const [queue, seen] of got) {
    await waitFor(`${breaching.length} breach events on ${queue}`, () => seen.length >= breaching.length);
    expect(seen).toHaveLength(breaching.length);
    expect(new Set(seen.map((m) => m.id)).size).toBe(breaching.length);
    const byReading = new Map(seen.map((m) => [(m.data as Json).reading_id as string, m]));
    expect(byReading.size).toBe(breaching.length);
    for (const r of breaching) {
      const m = byReading.get(r.id as string)!;
      expect(m).toMatchObject({ type: 'environmental.breach', org_id });
      expect(m.data).toEqual({
        reading_id: r.id,
        point_id: r.point_id,
        external_code: r.external_code,
        parameter: 'temperature',
        value: r.value,
        unit: r.unit,
        limit_min: 2,
        limit_max: r.limit_max ?? null,
        measured_at: r.measured_at,
      });
    }
  }
});
