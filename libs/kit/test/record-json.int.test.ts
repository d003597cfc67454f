import { sql } from 'drizzle-orm';
import { recordFromRowJson, recordJson, recordObject, records, timestampFromText, timestampText, type RecordCase } from '@lab/contracts';
import { newId, openDatabase, type Database } from '@lab/kit';
import { dropFreshDatabases, freshDatabaseUrl } from '../../../testing/src/backing';

// Typed records must answer clients exactly what PostgreSQL's row_to_json
// answered when records crossed gRPC as JSON text: the same fields in the same
// order, nulls, timestamps to the microsecond in PostgreSQL's own writing, and
// decimals with their stored digits. Each row here is rendered by PostgreSQL
// (as the records engine renders rows), sent through the protobuf codec, and
// written back by the gateway's mapping.

let db: Database;

beforeAll(async () => {
  db = await openDatabase({ url: await freshDatabaseUrl(), dataDir: `/tmp/lab-kit-${newId()}` });
});

afterAll(async () => {
  await db?.close();
  await dropFreshDatabases();
});

const rendered = async (select: string): Promise<string> =>
  (await db.rows<{ json: string }>(sql.raw(`select row_to_json(x)::text as json from (${select}) x`)))[0]!.json;

/** What the gateway answers for a row, after the record crossed gRPC. */
const overTheWire = (kind: RecordCase, json: string): records.Record => records.Record.decode(records.Record.encode(recordFromRowJson(kind, json)).finish());

const ID = "'0b7d3f5e-8a7c-4c8e-9d6a-3f1e2d4c5b6a'::uuid";

describe('a record answers the JSON PostgreSQL rendered', () => {
  it.each([
    ['whole seconds', "'2026-01-01 10:00:00+00'"],
    ['a tenth', "'2026-01-01 10:00:00.1+00'"],
    ['microseconds', "'2026-01-01 10:00:00.123456+00'"],
    ['trailing zeros of the microseconds', "'2026-01-01 10:00:00.120300+00'"],
    ['the time of writing', 'clock_timestamp()'],
  ])('a sample (timestamp with %s, nulls, an empty object)', async (_what, time) => {
    const json = await rendered(
      `select ${ID} as id, 'S-1' as name, null::text as type, 'registered' as status, '{}'::jsonb as metadata,
              null::text as storage_location, null::uuid as storage_location_id, null::uuid as department_id,
              ${ID} as owner_id, null::uuid as created_by, ${time}::timestamptz as created_at, ${time}::timestamptz as updated_at`,
    );
    expect(recordJson(overTheWire('sample', json))).toBe(json);
  });

  it('a stock movement keeps the digits of its decimals', async () => {
    const json = await rendered(
      `select ${ID} as id, ${ID} as stock_item_id, 'use' as movement_type, -2.500::numeric(12,3) as quantity_delta,
              12.50::numeric as quantity_after, 'ml' as unit, null::text as reason, 'assay' as intended_use, null::uuid as entry_id,
              null::uuid as created_by, now() as created_at, now() as updated_at`,
    );
    const record = overTheWire('stock_movement', json);
    expect(recordJson(record)).toBe(json);
    expect(json).toContain('"quantity_delta":-2.500,"quantity_after":12.50');
    expect(recordObject(record)).toMatchObject({ quantity_delta: -2.5, quantity_after: 12.5, reason: null });
  });

  it('a project keeps its tags and dates', async () => {
    const json = await rendered(
      `select ${ID} as id, 'P' as name, 'd "quoted" é' as description, 'active' as status, array['a','b']::text[] as tags,
              null::uuid as department_id, null::uuid as lead_researcher_id, null::uuid as parent_project_id,
              '2026-03-04'::date as start_date, ${ID} as created_by, now() as created_at, now() as updated_at`,
    );
    expect(recordJson(overTheWire('project', json))).toBe(json);
  });

  it('a calibration shows its data between the ids and the authorship fields', async () => {
    const json = await rendered(
      `select ${ID} as id, ${ID} as equipment_id, '{"lab":"A","points":[1.5,2],"ok":true,"none":null}'::jsonb as data,
              null::uuid as created_by, now() as created_at, now() as updated_at`,
    );
    const row = JSON.parse(json) as Record<string, unknown>;
    const { data, created_by, created_at, updated_at, ...ids } = row;
    const flattened = { ...ids, ...(data as object), created_by, created_at, updated_at };
    const answered = recordJson(overTheWire('calibration', json));
    expect(answered).toBe(JSON.stringify(flattened));
    expect(Object.keys(JSON.parse(answered) as object)).toEqual([
      'id',
      'equipment_id',
      'ok',
      'lab',
      'none',
      'points',
      'created_by',
      'created_at',
      'updated_at',
    ]);
  });
});

describe('timestamps', () => {
  it('keep the nanoseconds given and write microseconds as PostgreSQL does', () => {
    expect(timestampFromText('2026-01-01T10:00:00.123456789+00:00')).toEqual({ seconds: 1767261600, nanos: 123456789 });
    expect(timestampFromText('2026-01-01T12:00:00+02:00')).toEqual({ seconds: 1767261600, nanos: 0 });
    expect(timestampText({ seconds: 1767261600, nanos: 120_300_000 })).toBe('2026-01-01T10:00:00.1203+00:00');
    expect(timestampText({ seconds: 1767261600, nanos: 999 })).toBe('2026-01-01T10:00:00+00:00');
  });

  it('refuse text that is not one', () => {
    expect(() => timestampFromText('2026-01-01')).toThrow('not a timestamp');
  });
});
