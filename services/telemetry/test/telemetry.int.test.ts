import { jsonString, telemetry, telemetryItemJson, telemetryListJson, telemetryWire } from '@lab/contracts';
import { RpcClient, newId, type BusMessage, type CallerContext, type DomainError } from '@lab/kit';
import { sql } from 'drizzle-orm';
import { telemetryDefinition } from '@lab/telemetry';
import { readingRow } from '../src/readings';
import { startTestService, waitFor, type TestService } from '@lab/testing';

let t: TestService;
let rpc: RpcClient<typeof telemetry.TelemetryServiceService>;
let received: BusMessage[];

beforeAll(async () => {
  // raw files go to the service's data directory, which the harness removes
  t = await startTestService(telemetryDefinition(), { bindings: ['environmental.#', 'audit.record'] });
  received = t.events.received;
  rpc = new RpcClient(telemetryWire.Client, t.svc.address, { secret: t.secret });
});

afterAll(async () => {
  rpc?.close();
  await t?.stop();
});

type Json = Record<string, any>;

function org() {
  const org_id = newId();
  const caller = (over: Partial<CallerContext> = {}): CallerContext => ({
    org_id,
    user_id: null,
    role: null,
    department_id: null,
    scopes: ['read', 'write'],
    token_kind: 'api_key',
    token_id: newId(),
    request_id: newId(),
    ...over,
  });
  const operator = caller({ token_kind: 'operator', scopes: ['*'] });
  return { org_id, caller, key: caller(), admin: caller({ scopes: ['admin'] }), operator };
}

async function failure(p: Promise<unknown>): Promise<DomainError> {
  try {
    await p;
  } catch (err) {
    return err as DomainError;
  }
  throw new Error('expected the call to fail');
}

const until = <T>(check: () => T | undefined, what: string) => waitFor(what, check);

/** An answer as the JSON the API shows (the gateway writes it with the same helpers). */
const j = (r: telemetry.ItemResponse | telemetry.ListResponse): Json =>
  JSON.parse(jsonString('created' in r ? telemetryItemJson(r.item) : telemetryListJson(r.page))) as Json;

async function point(o: ReturnType<typeof org>, body: Json): Promise<Json> {
  return j(await rpc.call('createPoint', { org_id: o.org_id, point_id: '', body: body }, o.operator));
}
const ingest = async (o: ReturnType<typeof org>, body: unknown, caller = o.key) => j(await rpc.call('ingestReadings', { body: body }, caller));

describe('environmental points', () => {
  it('are created and changed by the operator only, listed to the org', async () => {
    const o = org();
    const p = await point(o, { parameter: 'temperature', unit: '°C', external_code: 'T-1', limit_min: 2, limit_max: 8 });
    expect(p).toMatchObject({ parameter: 'temperature', unit: '°C', external_code: 'T-1', limit_min: 2, limit_max: 8, active: true });
    const e = await failure(rpc.call('createPoint', { org_id: o.org_id, point_id: '', body: { parameter: 'x', unit: 'y' } }, o.admin));
    expect(e.kind).toBe('forbidden');
    const dup = await failure(point(o, { parameter: 'humidity', unit: '%', external_code: 'T-1' }));
    expect(dup.code).toBe('external_code_taken');
    const bad = await failure(point(o, { parameter: 'x', unit: 'y', limit_min: 5, limit_max: 1 }));
    expect(bad.code).toBe('validation_failed');
    const changed = j(await rpc.call('updatePoint', { org_id: o.org_id, point_id: p.id, body: { active: false } }, o.operator));
    expect(changed.active).toBe(false);
    const all = j(await rpc.call('listPoints', { query: {} }, o.key));
    expect(all).toHaveLength(1);
    expect(j(await rpc.call('listPoints', { query: { active: 'true' } }, o.key))).toHaveLength(0);
    expect(j(await rpc.call('listPoints', { query: {} }, org().key))).toHaveLength(0);
  });
});

describe('environmental readings', () => {
  it('stores the valid items of a batch and rejects the others one by one', async () => {
    const o = org();
    const p = await point(o, { parameter: 'temperature', unit: '°C', external_code: 'FRIDGE-1', limit_min: 2, limit_max: 8 });
    const off = await point(o, { parameter: 'humidity', unit: '%', external_code: 'OFF', active: false });
    const r = await ingest(o, {
      readings: [
        { point_id: p.id, value: 5 },
        { external_code: 'FRIDGE-1', value: 9, unit: 'degC', notes: 'door open' },
        { external_code: 'NOPE', value: 1 },
        { point_id: off.id, value: 1 },
        { point_id: p.id },
        { point_id: p.id, value: 'hot' },
      ],
    });
    expect(r.created).toBe(2);
    expect(r.breaches).toBe(1);
    expect(r.readings.map((x: Json) => [x.value, x.unit, x.is_breach, x.limit_min, x.limit_max])).toEqual([
      [5, '°C', false, 2, 8],
      [9, 'degC', true, 2, 8],
    ]);
    expect(r.rejected.map((x: Json) => [x.index, x.code])).toEqual([
      [2, 'point_not_found'],
      [3, 'point_inactive'],
      [4, 'validation_failed'],
      [5, 'validation_failed'],
    ]);
    expect(r.rejected[0].external_code).toBe('NOPE');
    expect(r.rejected[2].message).toContain('value');
  });

  it('answers all_readings_rejected (422) and stores nothing when every item is rejected', async () => {
    const o = org();
    const e = await failure(ingest(o, { readings: [{ external_code: 'X', value: 1 }, { value: 2 }] }));
    expect(e.kind).toBe('unprocessable');
    expect(e.code).toBe('all_readings_rejected');
    expect((e.details as Json).rejected.map((x: Json) => x.code)).toEqual(['point_not_found', 'validation_failed']);
    expect(j(await rpc.call('listReadings', { query: {} }, o.key))).toEqual([]);
  });

  it('refuses an empty or oversized batch as a whole', async () => {
    const o = org();
    expect((await failure(ingest(o, { readings: [] }))).code).toBe('validation_failed');
    const many = Array.from({ length: 501 }, () => ({ external_code: 'A', value: 1 }));
    expect((await failure(ingest(o, { readings: many }))).code).toBe('validation_failed');
  });

  it('flags breaches of both limits in the database, door contact included', async () => {
    const o = org();
    const t = await point(o, { parameter: 'temperature', unit: '°C', limit_min: 2, limit_max: 8 });
    const door = await point(o, { parameter: 'door contact', unit: 'state', external_code: 'DOOR', limit_max: 0 });
    const open = await point(o, { parameter: 'fill level', unit: '%' });
    const r = await ingest(o, {
      readings: [
        { point_id: t.id, value: 1.9 },
        { point_id: t.id, value: 2 },
        { point_id: t.id, value: 8 },
        { point_id: t.id, value: 8.1 },
        { external_code: 'DOOR', value: 0 },
        { external_code: 'DOOR', value: 1 },
        { point_id: open.id, value: -1e9 },
      ],
    });
    expect(r.readings.map((x: Json) => x.is_breach)).toEqual([true, false, false, true, false, true, false]);
    expect(r.breaches).toBe(3);
    const only = j(await rpc.call('listReadings', { query: { breaches: 'true', point_id: door.id } }, o.key));
    expect(only.map((x: Json) => x.value)).toEqual([1]);
  });

  it('keeps the limits a reading was stored with when the point changes', async () => {
    const o = org();
    const p = await point(o, { parameter: 'temperature', unit: '°C', limit_max: 8 });
    const first = (await ingest(o, { point_id: p.id, value: 9, measured_at: '2024-01-01T10:00:00+01:00' })).readings[0];
    expect(first).toMatchObject({ is_breach: true, limit_max: 8 });
    await rpc.call('updatePoint', { org_id: o.org_id, point_id: p.id, body: { limit_max: 10 } }, o.operator);
    const second = (await ingest(o, { point_id: p.id, value: 9 })).readings[0];
    expect(second).toMatchObject({ is_breach: false, limit_max: 10 });
    const list = j(await rpc.call('listReadings', { query: { point_id: p.id } }, o.key));
    expect(list.map((x: Json) => [x.id, x.limit_max, x.is_breach])).toEqual([
      [second.id, 10, false],
      [first.id, 8, true],
    ]);
    const since = j(await rpc.call('listReadings', { query: { since: '2024-06-01T00:00:00Z', limit: '1' } }, o.key));
    expect(since.map((x: Json) => x.id)).toEqual([second.id]);
  });

  it('refuses a batch holding text PostgreSQL cannot store, naming the field, and stores nothing', async () => {
    const o = org();
    const p = await point(o, { parameter: 'temp', unit: '°C' });
    await expect(
      ingest(
        o,
        {
          readings: [
            { point_id: p.id, value: 1 },
            // a NUL: an unpaired surrogate cannot cross the wire any more (protobuf strings are
            // UTF-8, it arrives as U+FFFD); the gateway refuses it in the body (400) before the call
            { point_id: p.id, value: 2, notes: 'bad \u0000' },
          ],
        },
        o.caller({ user_id: newId() }),
      ),
    ).rejects.toMatchObject({ kind: 'invalid', code: 'validation_failed', details: { field: 'readings.1.notes' } });
    expect(j(await rpc.call('listReadings', { query: { point_id: p.id } }, o.key))).toEqual([]);
  });

  it('answers with the readings exactly as they were stored and are listed', async () => {
    const o = org();
    const user = newId();
    const p = await point(o, { parameter: 'temp "room" \\ 1', unit: '°C', external_code: 'Ü-1\t', limit_min: -0.00001, limit_max: 1e15 });
    const q = await point(o, { parameter: 'fill', unit: '%' });
    const sample = newId().toUpperCase();
    const r = await ingest(
      o,
      {
        readings: [
          { point_id: p.id.toUpperCase(), value: 1e16, measured_at: '2024-01-01T10:00:00.1200+01:00', notes: 'a "quoted", {braced} \\ note\n\u0001 😀' },
          { external_code: 'Ü-1', value: 0, unit: '  K  ', sample_id: sample },
          { external_code: 'Ü-1', value: -2e-5, measured_at: '2024-01-01T09:00:00.12Z' },
          { point_id: q.id, value: 4.333333333333333, unit: 'NULL', notes: '' },
          { point_id: q.id, value: 123456789012345.6, measured_at: '2023-12-31T23:59:59.999999-05:30' },
          { point_id: q.id, value: 5e-324, notes: 'NULL' },
        ],
      },
      o.caller({ user_id: user }),
    );
    expect(r.created).toBe(6);
    const stored = j(await rpc.call('listReadings', { query: {} }, o.key)) as Json[];
    const byId = new Map(stored.map((x) => [x.id, x]));
    expect(r.readings.map((x: Json) => byId.get(x.id))).toEqual(r.readings);
    expect(r.readings.map((x: Json) => [x.value, x.unit, x.is_breach, x.sample_id, x.notes, x.created_by])).toEqual([
      [1e16, '°C', true, null, 'a "quoted", {braced} \\ note\n\u0001 😀', user],
      [0, 'K', false, sample.toLowerCase(), null, user],
      [-2e-5, '°C', true, null, null, user],
      [4.333333333333333, 'NULL', false, null, '', user],
      [123456789012345.6, '%', false, null, null, user],
      [5e-324, '%', false, null, 'NULL', user],
    ]);
    // the batch's ids increase in the order given
    expect([...r.readings.map((x: Json) => x.id)].sort()).toEqual(r.readings.map((x: Json) => x.id));
    expect(r.readings[0].measured_at).toBe('2024-01-01T09:00:00.12+00:00');
    expect(r.readings[2].measured_at).toBe(r.readings[0].measured_at);
    expect(r.readings[1].measured_at).toBe(r.readings[1].created_at);
    // the typed list (rows to messages, the wire, messages to JSON) is what PostgreSQL
    // renders of the same rows, value for value: floats, nulls and times to the microsecond
    const [pg] = await t.svc.deps.db.rows<{ json: string }>(
      sql`select json_agg(${readingRow} order by r.measured_at desc, r.id desc)::text as json
          from telemetry.environmental_readings r join telemetry.environmental_points p on p.org_id = r.org_id and p.id = r.point_id
          where r.org_id = ${o.org_id}`,
    );
    expect(stored).toEqual(JSON.parse(pg!.json));
  });

  it('publishes environmental.breach and one audit record per batch', async () => {
    const o = org();
    const p = await point(o, { parameter: 'temperature', unit: '°C', external_code: 'EV-1', limit_min: 2 });
    const r = await ingest(o, {
      readings: [
        { point_id: p.id, value: 1 },
        { point_id: p.id, value: 3 },
      ],
    });
    const ev = await until(() => received.find((m) => m.type === 'environmental.breach' && m.org_id === o.org_id), 'breach event');
    expect(ev.data).toEqual({
      reading_id: r.readings[0].id,
      point_id: p.id,
      external_code: 'EV-1',
      parameter: 'temperature',
      value: 1,
      unit: '°C',
      limit_min: 2,
      limit_max: null,
      measured_at: r.readings[0].measured_at,
    });
    const audit = await until(
      () => received.find((m) => m.type === 'audit.record' && m.org_id === o.org_id && (m.data as Json).action === 'ingest'),
      'audit record',
    );
    expect((audit.data as Json).after).toEqual({ created: 2, breaches: 1, rejected: 0 });
    expect(received.filter((m) => m.type === 'environmental.breach' && m.org_id === o.org_id)).toHaveLength(1);
  });
});

describe('devices, results, connectors', () => {
  const register = async (caller: CallerContext, body: Json) => j(await rpc.call('registerDevice', { body: body }, caller));

  it('registers, lists and deletes devices (administrator only); identifiers are unique per org', async () => {
    const o = org();
    const d = await register(o.key, { name: 'HPLC 1', identifier: 'hplc-1', type: 'hplc', manufacturer: 'Agilent', metadata: { bay: 3 } });
    expect(d).toMatchObject({ name: 'HPLC 1', identifier: 'hplc-1', kind: 'hplc', metadata: { bay: 3 } });
    expect((await failure(register(o.key, { name: 'again', identifier: 'hplc-1' }))).code).toBe('device_identifier_taken');
    expect(j(await rpc.call('listDevices', { query: {} }, o.key)).map((x: Json) => x.id)).toEqual([d.id]);
    expect((await failure(rpc.call('deleteDevice', { id: d.id }, o.key))).kind).toBe('forbidden');
    await rpc.call('deleteDevice', { id: d.id }, o.admin);
    expect(j(await rpc.call('listDevices', { query: {} }, o.key))).toEqual([]);
  });

  it('ingests results, lists them with filters and charts them', async () => {
    const o = org();
    const d = await register(o.key, { name: 'pH meter', identifier: 'ph-1' });
    const sample = newId();
    const r = j(
      await rpc.call(
        'ingestResult',
        {
          body: {
            device_id: d.id,
            sample_id: sample,
            measured_at: '2024-03-01T08:00:00Z',
            values: [
              { name: 'pH', value: 7.1 },
              { name: 'temp', value: 21.5, unit: '°C' },
              { name: 'pH', value: 7.2 },
            ],
          },
        },
        o.key,
      ),
    );
    expect(r).toMatchObject({ device_id: d.id, device_identifier: 'ph-1', sample_id: sample, raw_file: null });
    await rpc.call('ingestResult', { body: { device_identifier: 'ph-1', measured_at: '2024-04-01T08:00:00Z', values: [{ name: 'pH', value: 6 }] } }, o.key);
    expect(j(await rpc.call('listResults', { query: { sample_id: sample } }, o.key)).map((x: Json) => x.id)).toEqual([r.id]);
    expect(j(await rpc.call('listResults', { query: { from: '2024-03-15T00:00:00Z' } }, o.key))).toHaveLength(1);
    expect(j(await rpc.call('getResult', { id: r.id }, o.key)).values).toHaveLength(3);
    const chart = j(await rpc.call('getResultChart', { id: r.id }, o.key));
    expect(chart).toEqual({
      result_id: r.id,
      device_id: d.id,
      measured_at: r.measured_at,
      series: [
        {
          name: 'pH',
          unit: null,
          points: [
            { x: r.measured_at, y: 7.1 },
            { x: r.measured_at, y: 7.2 },
          ],
        },
        { name: 'temp', unit: '°C', points: [{ x: r.measured_at, y: 21.5 }] },
      ],
    });
    expect((await failure(rpc.call('getResult', { id: r.id }, org().key))).kind).toBe('not_found');
  });

  it('auto-registers an unknown device only with devices:register', async () => {
    const o = org();
    const body = { device_identifier: 'new-1', values: [{ name: 'x', value: 1 }] };
    const e = await failure(rpc.call('ingestResult', { body }, o.key));
    expect([e.kind, e.code]).toEqual(['forbidden', 'insufficient_scope']);
    const r = j(await rpc.call('ingestResult', { body }, o.caller({ scopes: ['write', 'devices:register'] })));
    expect(r.device_identifier).toBe('new-1');
    const nf = await failure(rpc.call('ingestResult', { body: { device_id: newId(), values: [{ name: 'x', value: 1 }] } }, o.key));
    expect(nf.code).toBe('device_not_found');
  });

  it('heartbeats connectors, syncs their devices and limits bound keys to them', async () => {
    const o = org();
    const hb = (caller: CallerContext, body: Json) => rpc.call('connectorHeartbeat', { body: body }, caller);
    const first = await hb(o.key, { name: 'lab-pc-1', version: '1.0', host: 'pc1', devices: [{ identifier: 'bal-1', name: 'Balance', kind: 'balance' }] });
    expect(first.created).toBe(true);
    const c = j(first);
    expect(c).toMatchObject({ name: 'lab-pc-1', status: 'online', device_count: 1, devices_synced: 1 });
    const again = await hb(o.key, { name: 'lab-pc-1', version: '1.1' });
    expect([again.created, j(again).id, j(again).version]).toEqual([false, c.id, '1.1']);
    expect(j(await rpc.call('getConnector', { id: c.id }, o.key))).toMatchObject({ id: c.id, status: 'online', last_seen_at: expect.any(String) });

    const other = await register(o.key, { name: 'Other', identifier: 'other-1' });
    const bound = o.caller({ connector_id: c.id });
    expect(j(await rpc.call('listDevices', { query: {} }, bound)).map((x: Json) => x.identifier)).toEqual(['bal-1']);
    const denied = await failure(rpc.call('ingestResult', { body: { device_id: other.id, values: [{ name: 'x', value: 1 }] } }, bound));
    expect(denied.kind).toBe('forbidden');
    expect((await failure(register(bound, { name: 'X', identifier: 'x-1', connector_id: newId() }))).kind).toBe('forbidden');
    const mine = await register(bound, { name: 'Mine', identifier: 'mine-1' });
    expect(mine.connector_id).toBe(c.id);
    const byDevice = o.caller({ device_ids: [other.id] });
    expect(j(await rpc.call('listDevices', { query: {} }, byDevice)).map((x: Json) => x.id)).toEqual([other.id]);

    expect((await failure(rpc.call('deleteConnector', { id: c.id }, o.key))).kind).toBe('forbidden');
    await rpc.call('deleteConnector', { id: c.id }, o.admin);
    expect((await failure(rpc.call('getConnector', { id: c.id }, o.key))).kind).toBe('not_found');
  });

  it('streams a raw file into storage and links a result to it', async () => {
    const o = org();
    const d = await register(o.key, { name: 'MS', identifier: 'ms-1' });
    const { createHash } = await import('node:crypto');
    const payload = Buffer.alloc(700 * 1024, 7);
    const { stream, response } = rpc.clientStream('uploadRawFile', o.key);
    stream.write({ meta: { device_id: d.id, filename: 'run.mzML', content_type: 'application/octet-stream' }, data: Buffer.alloc(0) });
    for (let i = 0; i < payload.length; i += 256 * 1024) stream.write({ data: payload.subarray(i, i + 256 * 1024) });
    stream.end();
    const r = j(await response);
    expect(r.raw_file).toMatchObject({ filename: 'run.mzML', size: payload.length, sha256: createHash('sha256').update(payload).digest('hex') });
    expect(j(await rpc.call('getResult', { id: r.id }, o.key)).raw_file.id).toBe(r.raw_file.id);

    const bad = rpc.clientStream('uploadRawFile', o.key);
    bad.stream.write({ meta: { device_id: newId(), filename: 'x.csv', content_type: 'text/csv' }, data: Buffer.from('a') });
    bad.stream.end();
    expect((await failure(bad.response)).code).toBe('device_not_found');
  });

  // the raw files' rows are looked at: the store in the schema, on a PostgreSQL server (PGlite keeps them on disk)
  (process.env.DATABASE_URL ? it : it.skip)('keeps nothing of an upload its client cancels half-way', async () => {
    const o = org();
    const d = await register(o.key, { name: 'Cancelled', identifier: 'cancelled-1' });
    const db = t.svc.deps.db;
    const count = async (q: ReturnType<typeof sql>) => Number((await db.rows<{ n: string }>(q))[0]!.n);
    const complete = () => count(sql`select count(*) as n from telemetry.stored_files where complete`);
    const pending = () =>
      count(sql`select count(*) as n from telemetry.stored_file_chunks c join telemetry.stored_files f on f.id = c.file_id where not f.complete`);
    const before = await complete();
    const { stream, response } = rpc.clientStream('uploadRawFile', o.key);
    const answered = response.then(
      () => 'answered',
      (err: unknown) => (err as DomainError).kind,
    );
    stream.write({ meta: { device_id: d.id, filename: 'half.csv', content_type: 'text/csv' }, data: Buffer.alloc(0) });
    stream.write({ data: Buffer.alloc(1024 * 1024, 1) });
    await waitFor('the upload to have stored a chunk', async () => (await pending()) > 0);
    stream.cancel();
    expect(await answered).not.toBe('answered');
    await waitFor(
      'the cancelled upload to leave no row',
      async () => (await pending()) === 0 && (await count(sql`select count(*) as n from telemetry.stored_files where not complete`)) === 0,
    );
    expect(await complete()).toBe(before);
  });

  it('streams a raw file back to its organisation, to a key that may act for its device only', async () => {
    const o = org();
    const d = await register(o.key, { name: 'Reader', identifier: 'reader-1' });
    const other = await register(o.key, { name: 'Other', identifier: 'other-1' });
    const payload = Buffer.from(Array.from({ length: 1300 * 1024 }, (_, i) => (i * 31) % 256));
    const { stream, response } = rpc.clientStream('uploadRawFile', o.key);
    stream.write({ meta: { device_id: d.id, filename: 'plate.csv', content_type: 'text/csv' }, data: payload });
    stream.end();
    const id: string = j(await response).raw_file.id;
    const read = async (caller: CallerContext) => {
      const messages: telemetry.RawFileChunk[] = [];
      for await (const m of rpc.stream('readRawFile', { id }, caller)) messages.push(m);
      return messages;
    };
    const messages = await read(o.key);
    expect(Buffer.concat(messages.map((m) => m.data)).equals(payload)).toBe(true);
    expect(messages[0]).toMatchObject({ filename: 'plate.csv', content_type: 'text/csv', size: payload.length });
    // gRPC messages of at most 64 KiB, whatever the store's chunks
    expect(Math.max(...messages.map((m) => m.data.length))).toBeLessThanOrEqual(64 * 1024);
    expect(await read(o.caller({ device_ids: [d.id] }))).toHaveLength(messages.length);
    expect((await failure(read(o.caller({ device_ids: [other.id] })))).kind).toBe('not_found');
    expect((await failure(read(org().key))).kind).toBe('not_found');
    // a user without a role in the organisation reads nothing of it
    expect((await failure(read(o.caller({ user_id: newId(), role: null })))).kind).toBe('forbidden');
  });
});
