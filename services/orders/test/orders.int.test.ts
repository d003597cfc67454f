import { sql } from 'drizzle-orm';
import { orderJson, orders, recordObject, records, recordsWire, resultJson } from '@lab/contracts';
import {
  Receipts,
  RpcClient,
  createLogger,
  newId,
  runService,
  type Bus,
  type BusMessage,
  type CallerContext,
  type DomainError,
  type RunningService,
} from '@lab/kit';
import { definition as notebookDefinition } from '@lab/notebook';
import { ordersDefinition, rowsWarning, samplesWarning } from '@lab/orders';
import { dropFreshDatabases, freshDatabaseUrl, tapEvents, testBus, uniqueExchange, waitFor as waitUntil, type EventTap } from '@lab/testing';

const log = createLogger('test', 'silent');
const secret = 'test-secret-0123456789';
const exchange = uniqueExchange();
let bus: Bus;
let tap: EventTap | undefined;
let notebook: RunningService;
let svc: RunningService;
let broken: RunningService;
let client: RpcClient<typeof orders.OrdersServiceService>;
let brokenClient: RpcClient<typeof orders.OrdersServiceService>;
let samples: RpcClient<typeof records.RecordServiceService>;
let received: BusMessage[] = [];

beforeAll(async () => {
  bus = await testBus(exchange);
  tap = await tapEvents(bus, exchange, ['sample.#', 'lab_order.#', 'lab_result.#', 'audit.record']);
  received = tap.received;
  const databaseUrl = await freshDatabaseUrl();
  const env = { log, bus, secret, databaseUrl, dataDir: `/tmp/lab-orders-${newId()}`, grpcAddress: '127.0.0.1:0', poolSize: 5 };
  notebook = await runService(notebookDefinition, env);
  svc = await runService(ordersDefinition({ notebookAddress: notebook.address, resultRowCap: 3, sampleLookupCap: 2 }), env);
  // the same service with a notebook that does not answer: every sample creation fails
  broken = await runService(ordersDefinition({ notebookAddress: '127.0.0.1:1' }), env);
  client = new RpcClient(orders.OrdersServiceClient, svc.address, { secret });
  brokenClient = new RpcClient(orders.OrdersServiceClient, broken.address, { secret });
  samples = new RpcClient(recordsWire.Client, notebook.address, { secret });
});

afterAll(async () => {
  client?.close();
  brokenClient?.close();
  samples?.close();
  await broken?.stop();
  await svc?.stop();
  await notebook?.stop();
  await tap?.close();
  await bus?.close();
  await dropFreshDatabases();
});

type Json = Record<string, any>;

function org() {
  const org_id = newId();
  const member = (role: string | null, over: Partial<CallerContext> = {}): CallerContext => ({
    org_id,
    user_id: newId(),
    role,
    department_id: null,
    scopes: ['read', 'write'],
    token_kind: 'api_key',
    token_id: newId(),
    request_id: newId(),
    ...over,
  });
  return { org_id, member, researcher: member('researcher'), qm: member('qm'), viewer: member('viewer') };
}

const orderBody = (n: number, over: Json = {}) => ({
  external_order_number: `ORD-${newId()}`,
  requester: { name: 'Dr. Who', email: 'who@example.test' },
  samples: Array.from({ length: n }, (_, i) => ({ name: `S${i}`, type: 'blood', metadata: { tube: i }, external_sample_id: `EXT-${i}` })),
  ...over,
});

// as the gateway answers them
const orderOf = (r: { order?: orders.LabOrder }): Json => JSON.parse(orderJson(r.order!, true));
const resultOf = (r: { result?: orders.LabResult }): Json => JSON.parse(resultJson(r.result!));
const create = async (caller: CallerContext, body: unknown, c = client): Promise<Json> => orderOf(await c.call('createOrder', { body: body as Json }, caller));
const failure = (p: Promise<unknown>) =>
  p.then(
    () => Promise.reject(new Error('expected a failure')),
    (e: DomainError) => e,
  );
const record = async (caller: CallerContext, orderId: string, body: Json): Promise<Json> =>
  resultOf(await client.call('recordResult', { order_id: orderId, body }, caller));
const release = async (caller: CallerContext, orderId: string, resultId: string): Promise<Json> =>
  resultOf(await client.call('releaseResult', { order_id: orderId, result_id: resultId }, caller));
const results = async (caller: CallerContext, query: Record<string, string> = {}) => {
  const r = await client.call('listResults', { query }, caller);
  return { ...r, data: r.results.map((x) => JSON.parse(resultJson(x)) as Json) };
};

const waitFor = (pred: (m: BusMessage) => boolean, n: number): Promise<BusMessage[]> =>
  waitUntil(`${n} matching event(s)`, () => {
    const found = received.filter(pred);
    return found.length >= n ? found : undefined;
  });

describe('orders over gRPC', () => {
  it('creates the order and its samples in the notebook, links them and emits lab_order.created', async () => {
    const o = org();
    const order = await create(o.researcher, orderBody(3, { priority: 'urgent', notes: 'fasting' }));
    expect(order).toMatchObject({
      status: 'received',
      priority: 'urgent',
      notes: 'fasting',
      requester: { name: 'Dr. Who', email: 'who@example.test', organisation: null },
      sample_count: 3,
      error: null,
      created_by: o.researcher.user_id,
    });
    expect(order.samples.map((s: Json) => [s.position, s.name, s.type, s.external_sample_id])).toEqual([
      [0, 'S0', 'blood', 'EXT-0'],
      [1, 'S1', 'blood', 'EXT-1'],
      [2, 'S2', 'blood', 'EXT-2'],
    ]);
    // the samples exist in the notebook, owned by it and created by the caller
    for (const s of order.samples as Json[]) {
      const sample = recordObject((await samples.call('getRecord', { resource: 'samples', id: s.sample_id, parent_id: '' }, o.researcher)).record!);
      expect(sample).toMatchObject({ id: s.sample_id, name: s.name, type: 'blood', metadata: { tube: s.position }, created_by: o.researcher.user_id });
    }
    const ids = order.samples.map((s: Json) => s.sample_id);
    const created = await waitFor((m) => m.type === 'sample.created' && ids.includes((m.data as Json).id), 3);
    expect(created).toHaveLength(3);
    const [event] = await waitFor((m) => m.type === 'lab_order.created' && (m.data as Json).id === order.id, 1);
    expect(event!.data).toMatchObject({ id: order.id, status: 'received', sample_count: 3, sample_ids: ids });
    const audits = await waitFor((m) => m.type === 'audit.record' && (m.data as Json).record_id === order.id, 1);
    expect(audits[0]!.data).toMatchObject({ action: 'create', resource: 'lab_order', service: 'orders' });

    const got = orderOf(await client.call('getOrder', { id: order.id }, o.member('viewer')));
    expect(got).toEqual(order);
  });

  it('takes an order of the maximum 200 samples', async () => {
    const o = org();
    const order = await create(o.researcher, orderBody(200));
    expect([order.status, order.sample_count, order.samples.length]).toEqual(['received', 200, 200]);
    expect(new Set(order.samples.map((s: Json) => s.sample_id)).size).toBe(200);
  });

  it('accepts requester_name, defaults priority to routine, and refuses bad bodies without writing', async () => {
    const o = org();
    const order = await create(o.researcher, { external_order_number: 'A-1', requester_name: 'Lab X', samples: [{ name: 'only' }] });
    expect(order).toMatchObject({ priority: 'routine', requester: { name: 'Lab X', email: null }, sample_count: 1 });
    const bad = [
      {},
      { ...orderBody(1), requester_name: 'both' },
      orderBody(0),
      orderBody(201),
      orderBody(1, { priority: 'asap' }),
      orderBody(1, { external_order_number: 'x'.repeat(101) }),
      orderBody(1, { samples: [{ type: 'no name' }] }),
      orderBody(1, { samples: [{ name: 'a', metadata: [] }] }),
      orderBody(1, { unknown: 1 }),
    ];
    for (const body of bad) {
      const err = await failure(create(o.researcher, body));
      expect([err.kind, err.code]).toEqual(['invalid', 'validation_failed']);
    }
    const list = await client.call('listOrders', { query: {} }, o.researcher);
    expect(list.total).toBe(1);
    expect((await failure(create(o.viewer, orderBody(1)))).kind).toBe('forbidden');
  });

  it('answers 409 duplicate_order for a number already taken in the organisation, not in another one', async () => {
    const o = org();
    const body = orderBody(1);
    await create(o.researcher, body);
    const err = await failure(create(o.researcher, { ...body, samples: [{ name: 'again' }] }));
    expect([err.kind, err.code]).toEqual(['conflict', 'duplicate_order']);
    expect((await create(org().researcher, body)).status).toBe('received');
    const list = await client.call('listOrders', { query: { external_order_number: body.external_order_number } }, o.researcher);
    expect(list.total).toBe(1);
  });

  it('marks the order failed when a sample cannot be created, returns the error, and frees the number', async () => {
    const o = org();
    const body = orderBody(2);
    const err = await failure(create(o.researcher, body, brokenClient));
    expect(err.kind).toBe('unavailable');
    expect(err.details).toMatchObject({ sample_index: 0, order_id: expect.any(String) });
    const failed = orderOf(await client.call('getOrder', { id: err.details!.order_id as string }, o.researcher));
    expect(failed).toMatchObject({ status: 'failed', sample_count: 0, samples: [], error: { sample_index: 0, code: err.code } });
    const again = await create(o.researcher, body);
    expect(again).toMatchObject({ status: 'received', sample_count: 2 });
    const listed = await client.call('listOrders', { query: { external_order_number: body.external_order_number, status: 'failed' } }, o.researcher);
    expect(listed.total).toBe(1);
  });

  it('lists orders newest first with paging and filters, only of the caller organisation', async () => {
    const o = org();
    const a = await create(o.researcher, orderBody(1, { priority: 'stat' }));
    const b = await create(o.researcher, orderBody(1));
    const all = await client.call('listOrders', { query: { limit: '1' } }, o.researcher);
    expect([all.total, all.limit, all.offset]).toEqual([2, 1, 0]);
    expect(all.orders.map((x) => x.id)).toEqual([b.id]);
    const stat = await client.call('listOrders', { query: { priority: 'stat' } }, o.researcher);
    expect(stat.orders.map((x) => x.id)).toEqual([a.id]);
    expect(stat.orders[0]!.samples).toEqual([]);
    for (const query of [{ limit: '501' }, { limit: '0' }, { status: 'done' }, { other: 'x' }]) {
      expect((await failure(client.call('listOrders', { query }, o.researcher))).code).toBe('validation_failed');
    }
    const stranger = org().researcher;
    expect((await failure(client.call('getOrder', { id: a.id }, stranger))).kind).toBe('not_found');
    expect((await client.call('listOrders', { query: {} }, stranger)).total).toBe(0);
  });
});

describe('results', () => {
  it('records results for the order samples, releases them (admin or qm) and lists released ones only', async () => {
    const o = org();
    const order = await create(o.researcher, orderBody(2));
    const [s0, s1] = order.samples as Json[];
    const r1 = await record(o.researcher, order.id, { sample_id: s0!.sample_id, analyte: 'glucose', value: 5.4, unit: 'mmol/L', flag: 'N' });
    expect(r1).toMatchObject({ status: 'recorded', value: 5.4, released_at: null, order_id: order.id, external_sample_id: 'EXT-0' });
    const r2 = await record(o.researcher, order.id, { sample_id: s1!.sample_id, analyte: 'blood group', value: 'A+' });
    expect(r2.value).toBe('A+');

    const notOfOrder = await failure(record(o.researcher, order.id, { sample_id: newId(), analyte: 'x', value: 1 }));
    expect([notOfOrder.code, (notOfOrder.details as Json).field]).toEqual(['validation_failed', 'sample_id']);
    for (const body of [
      { sample_id: s0!.sample_id, analyte: 'x', value: true },
      { sample_id: s0!.sample_id, value: 1 },
      { sample_id: 'nope', analyte: 'x', value: 1 },
    ]) {
      expect((await failure(record(o.researcher, order.id, body))).code).toBe('validation_failed');
    }
    expect((await failure(record(o.researcher, newId(), { sample_id: s0!.sample_id, analyte: 'x', value: 1 }))).kind).toBe('not_found');

    expect((await results(o.researcher, { order_id: order.id })).data).toEqual([]);
    expect((await failure(release(o.researcher, order.id, r1.id))).kind).toBe('forbidden');
    expect((await failure(release(o.member(null, { user_id: null }), order.id, r1.id))).kind).toBe('forbidden');
    const released = await release(o.qm, order.id, r1.id);
    expect(released).toMatchObject({ id: r1.id, status: 'released', released_by: o.qm.user_id, released_at: expect.any(String) });
    expect((await failure(release(o.qm, order.id, r1.id))).code).toBe('already_released');
    expect((await failure(release(org().qm, order.id, r1.id))).kind).toBe('not_found');

    const listed = await results(o.researcher, { order_id: order.id });
    expect(listed.data).toEqual([released]);
    expect([listed.total, listed.capped, listed.warnings]).toEqual([1, false, []]);
    expect((await results(o.researcher, { sample_id: s1!.sample_id })).data).toEqual([]);
    expect((await results(org().researcher)).data).toEqual([]);
    const [event] = await waitFor((m) => m.type === 'lab_result.released' && (m.data as Json).id === r1.id, 1);
    expect(event!.data).toMatchObject({ id: r1.id, order_id: order.id, sample_id: s0!.sample_id, analyte: 'glucose', value: 5.4 });
    const audits = await waitFor((m) => m.type === 'audit.record' && (m.data as Json).record_id === r1.id, 2);
    expect(audits.map((a) => (a.data as Json).action).sort()).toEqual(['create', 'release']);
  });

  it('caps result rows and the sample lookup, and says so', async () => {
    const o = org();
    const admin = o.member('admin');
    const order = await create(o.researcher, orderBody(3));
    for (const s of order.samples as Json[]) {
      for (const analyte of ['a', 'b']) {
        const r = await record(o.researcher, order.id, { sample_id: s.sample_id, analyte, value: 1 });
        await release(admin, order.id, r.id);
      }
    }
    // 6 released results, row cap 3
    const all = await results(o.researcher);
    expect([all.data.length, all.total, all.capped, all.sample_lookup_capped, all.limit]).toEqual([3, 6, true, false, 3]);
    expect(all.warnings).toEqual([rowsWarning(3)]);
    // asking for fewer rows is paging, not capping
    const few = await results(o.researcher, { limit: '2', offset: '4' });
    expect([few.data.length, few.capped, few.warnings]).toEqual([2, false, []]);
    expect((await failure(results(o.researcher, { limit: '4' }))).code).toBe('validation_failed');
    // the order has 3 samples, sample lookup cap 2: only 2 samples' results (4 rows, row cap 3)
    const byOrder = await results(o.researcher, { external_order_number: order.external_order_number });
    expect([byOrder.data.length, byOrder.total, byOrder.sample_lookup_capped, byOrder.capped]).toEqual([3, 4, true, true]);
    expect(byOrder.warnings).toEqual([rowsWarning(3), samplesWarning(2)]);
    const sampleIds = new Set(byOrder.data.map((r) => r.sample_id));
    expect(sampleIds.size).toBe(2);

    // set-based: the cap holds for many rows too
    await svc.deps.db.orm.execute(sql`insert into orders.lab_results (id, org_id, order_id, sample_id, analyte, value, status, released_at)
      select gen_random_uuid(), ${o.org_id}::uuid, ${order.id}::uuid, ${order.samples[0].sample_id}::uuid, 'bulk', to_jsonb(g), 'released', now()
      from generate_series(1, 50) g`);
    const bulk = await results(o.researcher, { sample_id: order.samples[0].sample_id });
    expect([bulk.data.length, bulk.total, bulk.capped]).toEqual([3, 52, true]);
  });

  it('keeps the answer of a keyed record or release in its own transaction: a retry gets it though the batched store is lost', async () => {
    const o = org();
    const order = await create(o.researcher, orderBody(1));
    const sample_id = (order.samples as Json[])[0]!.sample_id as string;
    const receipt = async (key: string) =>
      svc.deps.db.rows<{ answered: boolean }>(sql`select answer is not null as answered from orders.call_receipts where key = ${key}`);
    // the answers the gRPC server would store after the handler are dropped, as by a process killed right after the commit
    const batched = jest.spyOn(Receipts.prototype as unknown as { storeAnswers(items: unknown[]): Promise<void> }, 'storeAnswers').mockResolvedValue(undefined);
    try {
      const keyed = async <T>(call: (c: CallerContext) => Promise<T>, who: CallerContext): Promise<T> => {
        const key = `key-${newId()}`;
        const first = await call({ ...who, request_id: newId(), idempotency_key: key });
        expect(await receipt(key)).toEqual([{ answered: true }]);
        expect(await call({ ...who, request_id: newId(), idempotency_key: key })).toEqual(first);
        return first;
      };
      const body = { sample_id, analyte: 'glucose', value: 5.4 };
      const r = await keyed((c) => client.call('recordResult', { order_id: order.id, body }, c), o.researcher);
      const id = r.result!.id;
      const n = await svc.deps.db.rows<{ n: number }>(sql`select count(*)::int as n from orders.lab_results where order_id = ${order.id}::uuid`);
      expect(n[0]!.n).toBe(1);
      // the retry of a release finds it released (409 already_released) and is given the first answer instead
      const released = await keyed((c) => client.call('releaseResult', { order_id: order.id, result_id: id }, c), o.qm);
      expect(resultOf(released)).toMatchObject({ id, status: 'released' });
      expect(batched).not.toHaveBeenCalled();
    } finally {
      batched.mockRestore();
    }
  });
});
