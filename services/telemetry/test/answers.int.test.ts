import { sql } from 'drizzle-orm';
import { jsonString, telemetry, telemetryItemJson, telemetryWire } from '@lab/contracts';
import { Receipts, RpcClient, newId, type CallerContext } from '@lab/kit';
import { telemetryDefinition } from '@lab/telemetry';
import { startTestService, type TestService } from '@lab/testing';

// Keyed writes keep their answer in their own transaction (Outbox.write with
// `answer`). The answers the gRPC server would store after the handler (batched,
// not awaited) are dropped here, as by a process killed right after the commit:
// the receipt must hold the answer anyway, and a retry of the key must get it.

let t: TestService;
let rpc: RpcClient<typeof telemetry.TelemetryServiceService>;
let batched: jest.SpyInstance;

beforeAll(async () => {
  t = await startTestService(telemetryDefinition(), { bindings: ['audit.record'] });
  rpc = new RpcClient(telemetryWire.Client, t.svc.address, { secret: t.secret });
  batched = jest.spyOn(Receipts.prototype as unknown as { storeAnswers(items: unknown[]): Promise<void> }, 'storeAnswers').mockResolvedValue(undefined);
});

afterAll(async () => {
  batched?.mockRestore();
  rpc?.close();
  await t?.stop();
});

type Json = Record<string, any>;

function org() {
  const org_id = newId();
  const token_id = newId();
  const caller = (over: Partial<CallerContext> = {}): CallerContext => ({
    org_id,
    user_id: null,
    role: null,
    department_id: null,
    scopes: ['read', 'write', 'admin'],
    token_kind: 'api_key',
    token_id,
    request_id: newId(),
    ...over,
  });
  const operator = caller({ token_kind: 'operator', token_id: null, scopes: ['*'] });
  return { org_id, caller, operator };
}

const count = async (query: ReturnType<typeof sql>) => (await t.svc.deps.db.rows<{ n: number }>(query))[0]!.n;
const receipt = async (key: string) =>
  t.svc.deps.db.rows<{ answered: boolean }>(sql`select answer is not null as answered from telemetry.call_receipts where key = ${key}`);

/** A keyed call, its receipt right after it, and a retry of the key (a fresh request id, as the gateway's retry). */
async function keyedTwice<T>(call: (c: CallerContext) => Promise<T>, o: ReturnType<typeof org>): Promise<T> {
  const key = `key-${newId()}`;
  const first = await call(o.caller({ idempotency_key: key }));
  expect(await receipt(key)).toEqual([{ answered: true }]);
  const again = await call(o.caller({ idempotency_key: key }));
  expect(again).toEqual(first);
  return first;
}

afterEach(() => {
  // every answer came from its write's transaction: none was left to the batched store
  expect(batched).not.toHaveBeenCalled();
});

test('ingestReadings: the answer commits with the readings; a retry gets it and stores nothing', async () => {
  const o = org();
  const p = JSON.parse(
    jsonString(
      telemetryItemJson(
        (await rpc.call('createPoint', { org_id: o.org_id, point_id: '', body: { parameter: 'temperature', unit: '°C', limit_max: 8 } }, o.operator)).item,
      ),
    ),
  ) as Json;
  const body = {
    readings: [
      { point_id: p.id, value: 5 },
      { point_id: p.id, value: 9 },
      { external_code: 'NOPE', value: 1 },
    ],
  };
  const first = await keyedTwice((c) => rpc.call('ingestReadings', { body }, c), o);
  expect(first.created).toBe(true);
  const r = JSON.parse(jsonString(telemetryItemJson(first.item))) as Json;
  expect(r).toMatchObject({ created: 2, breaches: 1, rejected: [{ index: 2, code: 'point_not_found' }] });
  expect(await count(sql`select count(*)::int as n from telemetry.environmental_readings where org_id = ${o.org_id}`)).toBe(2);
});

test('ingestReadings: a call whose every reading is rejected keeps no receipt', async () => {
  const o = org();
  const key = `key-${newId()}`;
  const body = { readings: [{ external_code: 'NOPE', value: 1 }] };
  await expect(rpc.call('ingestReadings', { body }, o.caller({ idempotency_key: key }))).rejects.toMatchObject({ code: 'all_readings_rejected' });
  expect(await receipt(key)).toEqual([]);
});

test('registerDevice and deleteDevice', async () => {
  const o = org();
  const body = { name: 'pH meter', identifier: `ph-${newId()}` };
  const d = await keyedTwice((c) => rpc.call('registerDevice', { body }, c), o);
  expect(d.created).toBe(true);
  const id = (JSON.parse(jsonString(telemetryItemJson(d.item))) as Json).id as string;
  expect(await count(sql`select count(*)::int as n from telemetry.devices where org_id = ${o.org_id}`)).toBe(1);
  // the retry of a delete finds no device, and is given the first call's empty answer rather than 404
  expect(await keyedTwice((c) => rpc.call('deleteDevice', { id }, c), o)).toEqual({});
  expect(await count(sql`select count(*)::int as n from telemetry.devices where org_id = ${o.org_id}`)).toBe(0);
});

test('connectorHeartbeat and deleteConnector', async () => {
  const o = org();
  const body = { name: 'bench-1', devices: [{ identifier: 'balance-1', name: 'Balance' }] };
  const hb = await keyedTwice((c) => rpc.call('connectorHeartbeat', { body }, c), o);
  // a second heartbeat would answer created: false; the retry is given the first answer
  expect(hb.created).toBe(true);
  const id = (JSON.parse(jsonString(telemetryItemJson(hb.item))) as Json).id as string;
  expect(await keyedTwice((c) => rpc.call('deleteConnector', { id }, c), o)).toEqual({});
});

test('ingestResult', async () => {
  const o = org();
  const body = { device_identifier: `ph-${newId()}`, values: [{ name: 'pH', value: 6.5 }] };
  const r = await keyedTwice((c) => rpc.call('ingestResult', { body }, c), o);
  expect(r.created).toBe(true);
  expect(await count(sql`select count(*)::int as n from telemetry.results where org_id = ${o.org_id}`)).toBe(1);
});
