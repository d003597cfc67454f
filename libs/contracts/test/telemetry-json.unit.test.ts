import {
  connectorFromRow,
  JSON_PIECE_CHARS,
  jsonArray,
  jsonString,
  deviceFromRow,
  pointFromRow,
  readingFromRow,
  resultChartFromRow,
  resultFromRow,
  telemetry,
  telemetryItemJson,
  timestampFromText,
  telemetryListJson,
} from '@lab/contracts';

/**
 * The telemetry answers as PostgreSQL rendered them (json_build_object, the
 * session in UTC) go through the typed messages and the wire and come back as the
 * very same text: fields in order, nulls as null, timestamps to the microsecond
 * with trailing zeros dropped, floats with PostgreSQL's digits. The texts below
 * are PostgreSQL's without the spaces json_build_object puts around ':' and
 * after ',' (the answers are compact JSON now, as the records' always were);
 * services/telemetry/test/telemetry.int.test.ts holds a listed page to
 * PostgreSQL's own rendering, value for value.
 */
type Row = Record<string, unknown>;

/** The answer's resource through the wire, as the gateway receives it. */
function overWire(item: telemetry.ItemResponse['item']): telemetry.ItemResponse {
  return telemetry.ItemResponse.decode(telemetry.ItemResponse.encode({ created: true, item }).finish());
}
const pageOverWire = (page: telemetry.ListResponse['page']): telemetry.ListResponse =>
  telemetry.ListResponse.decode(telemetry.ListResponse.encode({ limit: 1, offset: 0, page }).finish());

const ID = '0190a0c8-0000-7000-8000-00000000000a';
const ID2 = '0190a0c8-0000-7000-8000-00000000000b';

const POINT = `{"id":"${ID}","external_code":"Ü-1\\t \\"x\\"","parameter":"temperature","unit":"°C","limit_min":-1e-05,"limit_max":1e+15,"room_id":null,"equipment_id":"${ID2}","active":true,"created_at":"2026-01-02T03:04:05.12+00:00","updated_at":"2026-01-02T03:04:05+00:00"}`;
const BARE_POINT = `{"id":"${ID2}","external_code":null,"parameter":"fill","unit":"%","limit_min":null,"limit_max":null,"room_id":null,"equipment_id":null,"active":false,"created_at":"1999-12-31T23:59:59.999999+00:00","updated_at":"2000-01-01T00:00:00.000001+00:00"}`;
const READING = `{"id":"${ID}","point_id":"${ID2}","external_code":null,"parameter":"temp \\"room\\" \\\\ 1","value":1e+16,"unit":"°C","limit_min":-0.5,"limit_max":8,"is_breach":true,"measured_at":"2024-01-01T09:00:00.12+00:00","sample_id":null,"notes":"a \\"quoted\\" note\\n\\u0001 😀","created_by":"${ID2}","created_at":"2026-11-26T10:00:00.5+00:00"}`;
const READING_NULLS = `{"id":"${ID2}","point_id":"${ID}","external_code":"D-1","parameter":"door","value":0,"unit":"","limit_min":null,"limit_max":0,"is_breach":false,"measured_at":"2026-11-26T10:00:00+00:00","sample_id":"${ID}","notes":null,"created_by":null,"created_at":"2026-11-26T10:00:00+00:00"}`;
const DEVICE = `{"id":"${ID}","name":"pH meter","identifier":"ph-1","kind":null,"manufacturer":"ACME","model":null,"serial_number":null,"connector_id":"${ID2}","metadata":{"room":"B1","calibrated":true,"n":[1,2.5,null],"nested":{"a":"b"}},"created_by":null,"created_at":"2026-01-02T03:04:05.123456+00:00","updated_at":"2026-01-02T03:04:05.123456+00:00"}`;
const RESULT = `{"id":"${ID}","device_id":"${ID2}","device_identifier":"ph-1","sample_id":null,"sample_ref":"S-12","measured_at":"2024-04-01T08:00:00+00:00","values":[{"name":"pH","unit":"pH","value":6.5},{"name":"T","value":-21}],"metadata":{},"raw_file":{"id":"${ID2}","filename":"run \\"1\\".mzML","size":123456789,"sha256":"${'ab'.repeat(32)}","content_type":"application/octet-stream"},"created_by":"${ID}","created_at":"2024-04-01T08:00:01.1+00:00"}`;
const BARE_RESULT = `{"id":"${ID2}","device_id":null,"device_identifier":null,"sample_id":"${ID}","sample_ref":null,"measured_at":"2024-04-01T08:00:00+00:00","values":[],"metadata":{"operator":"x"},"raw_file":null,"created_by":null,"created_at":"2024-04-01T08:00:00+00:00"}`;
const CHART = `{"result_id":"${ID}","device_id":null,"measured_at":"2024-04-01T08:00:00.25+00:00","series":[{"name":"pH","unit":"pH","points":[{"x":"2024-04-01T08:00:00.25+00:00","y":6.5},{"x":"2024-04-01T08:00:00.25+00:00","y":7}]},{"name":"T","unit":null,"points":[{"x":"2024-04-01T08:00:00.25+00:00","y":-0.001}]}]}`;
const CONNECTOR = `{"id":"${ID}","name":"bench-1","version":null,"host":"lab-pc","last_seen_at":"2026-11-26T10:00:00.000123+00:00","status":"online","device_count":3,"created_by":null,"created_at":"2026-11-26T09:00:00+00:00","updated_at":"2026-11-26T10:00:00.000123+00:00"}`;
const NEVER_SEEN = `{"id":"${ID2}","name":"idle","version":"1.2","host":null,"last_seen_at":null,"status":"offline","device_count":0,"created_by":"${ID}","created_at":"2026-11-26T09:00:00+00:00","updated_at":"2026-11-26T09:00:00+00:00"}`;

const parse = (json: string) => JSON.parse(json) as Row;

describe('telemetry answers through the typed messages', () => {
  it.each([
    ['a point', POINT, (r: Row) => ({ $case: 'point' as const, value: pointFromRow(r) })],
    ['a point with every nullable field null', BARE_POINT, (r: Row) => ({ $case: 'point' as const, value: pointFromRow(r) })],
    ['a device with free-form metadata', DEVICE, (r: Row) => ({ $case: 'device' as const, value: deviceFromRow(r) })],
    ['a result with values and its raw file', RESULT, (r: Row) => ({ $case: 'result' as const, value: resultFromRow(r) })],
    ['a result without device, values or file', BARE_RESULT, (r: Row) => ({ $case: 'result' as const, value: resultFromRow(r) })],
    ['a chart', CHART, (r: Row) => ({ $case: 'result_chart' as const, value: resultChartFromRow(r) })],
    ['a connector', CONNECTOR, (r: Row) => ({ $case: 'connector' as const, value: connectorFromRow(r) })],
    ['a connector never seen', NEVER_SEEN, (r: Row) => ({ $case: 'connector' as const, value: connectorFromRow(r) })],
  ])('%s comes back as the text PostgreSQL wrote', (_what, text, toItem) => {
    expect(telemetryItemJson(overWire(toItem(parse(text))).item)).toBe(text);
  });

  it('writes a heartbeat as the connector with devices_synced', () => {
    const item = { $case: 'connector_heartbeat' as const, value: { connector: connectorFromRow(parse(CONNECTOR)), devices_synced: 2 } };
    expect(telemetryItemJson(overWire(item).item)).toBe(`${CONNECTOR.slice(0, -1)},"devices_synced":2}`);
  });

  it('writes the readings of a list page as PostgreSQL wrote them, in order', () => {
    const readings = [READING, READING_NULLS].map((t) => readingFromRow(parse(t)));
    expect(telemetryListJson(pageOverWire({ $case: 'readings', value: { readings } }).page)).toBe(`[${READING},${READING_NULLS}]`);
    expect(telemetryListJson(pageOverWire({ $case: 'readings', value: { readings: [] } }).page)).toBe('[]');
    const points = [POINT, BARE_POINT].map((t) => pointFromRow(parse(t)));
    expect(telemetryListJson(pageOverWire({ $case: 'points', value: { points } }).page)).toBe(`[${POINT},${BARE_POINT}]`);
  });

  it('writes an ingest answer as a list writes its readings: points sent once, a reading naming its own unit or its point’s', () => {
    // three readings of two points, one with a unit of its own; the batch's creation once
    const created_at = timestampFromText('2026-11-26T10:00:00.5+00:00');
    const value: telemetry.ReadingsIngested = {
      created: 3,
      breaches: 1,
      created_by: ID2,
      created_at,
      points: [
        { point_id: ID2, parameter: 'temp "room" \\ 1', unit: '°C', limit_min: -0.5, limit_max: 8 },
        { point_id: ID, external_code: 'D-1', parameter: 'door', unit: '', limit_max: 0 },
      ],
      readings: [
        { id: ID, point: 0, value: 1e16, is_breach: true, measured_at: timestampFromText('2024-01-01T09:00:00.12+00:00'), notes: 'a "quoted" note\n\u0001 😀' },
        { id: ID2, point: 1, value: 0, is_breach: false, measured_at: created_at, sample_id: ID },
        { id: ID2, point: 0, value: 3.5, unit: 'K', is_breach: false, measured_at: created_at },
      ],
      rejected: [],
    };
    const listed = [
      READING,
      READING_NULLS.replace('"created_by":null', `"created_by":"${ID2}"`).replace(/"(measured_at|created_at)":"[^"]+"/g, '"$1":"2026-11-26T10:00:00.5+00:00"'),
    ];
    const third = listed[0]!
      .replace(`"id":"${ID}"`, `"id":"${ID2}"`)
      .replace('"value":1e+16', '"value":3.5')
      .replace('"unit":"°C"', '"unit":"K"')
      .replace('"is_breach":true', '"is_breach":false')
      .replace('"measured_at":"2024-01-01T09:00:00.12+00:00"', '"measured_at":"2026-11-26T10:00:00.5+00:00"')
      .replace(/"notes":"[^]*?","created_by"/, '"notes":null,"created_by"');
    expect(telemetryItemJson(overWire({ $case: 'readings_ingested', value }).item)).toBe(
      `{"created":3,"breaches":1,"readings":[${[...listed, third].join(',')}],"rejected":[]}`,
    );
    // an index past the points is a broken answer, not a reading of no point
    expect(() =>
      telemetryItemJson(overWire({ $case: 'readings_ingested', value: { ...value, readings: [{ ...value.readings[0]!, point: 2 }] } }).item),
    ).toThrow(/point 2 of 2/);
  });

  it('writes an ingest answer with its rejections, naming only the fields the item gave', () => {
    const value: telemetry.ReadingsIngested = {
      created: 1,
      breaches: 1,
      created_by: ID2,
      created_at: timestampFromText('2026-11-26T10:00:00.5+00:00'),
      points: [{ point_id: ID2, parameter: 'temp "room" \\ 1', unit: '°C', limit_min: -0.5, limit_max: 8 }],
      readings: [
        { id: ID, point: 0, value: 1e16, is_breach: true, measured_at: timestampFromText('2024-01-01T09:00:00.12+00:00'), notes: 'a "quoted" note\n\u0001 😀' },
      ],
      rejected: [
        { index: 1, code: telemetry.RejectionCode.REJECTION_CODE_POINT_NOT_FOUND, message: 'no environmental point', external_code: 'NOPE' },
        { index: 2, code: telemetry.RejectionCode.REJECTION_CODE_VALIDATION_FAILED, message: 'value: must be a finite number' },
        { index: 3, code: telemetry.RejectionCode.REJECTION_CODE_POINT_INACTIVE, message: 'inactive', point_id: ID2 },
      ],
    };
    expect(telemetryItemJson(overWire({ $case: 'readings_ingested', value }).item)).toBe(
      `{"created":1,"breaches":1,"readings":[${READING}],"rejected":[` +
        `{"index":1,"code":"point_not_found","message":"no environmental point","external_code":"NOPE"},` +
        `{"index":2,"code":"validation_failed","message":"value: must be a finite number"},` +
        `{"index":3,"code":"point_inactive","message":"inactive","point_id":"${ID2}"}]}`,
    );
  });

  it('keeps an ingest of 500 readings in pieces, each well under a large object, that join to the same text', () => {
    const value: telemetry.ReadingsIngested = {
      created: 500,
      breaches: 0,
      created_by: ID2,
      created_at: timestampFromText('2026-11-26T10:00:00.5+00:00'),
      points: [{ point_id: ID2, parameter: 'temperature', unit: '°C', limit_min: -0.5, limit_max: 8 }],
      readings: Array.from({ length: 500 }, (_, i) => ({
        id: ID,
        point: 0,
        value: i / 7,
        is_breach: false,
        measured_at: timestampFromText('2024-01-01T09:00:00.12+00:00'),
      })),
      rejected: [],
    };
    const text = telemetryItemJson(overWire({ $case: 'readings_ingested', value }).item);
    expect(Array.isArray(text)).toBe(true);
    // a piece may exceed JSON_PIECE_CHARS by one reading, never by much
    for (const piece of text as readonly string[]) expect(piece.length).toBeLessThan(JSON_PIECE_CHARS + 1024);
    const whole = JSON.parse(jsonString(text)) as { created: number; readings: { value: number }[]; rejected: unknown[] };
    expect(whole.readings.map((r) => r.value)).toEqual(value.readings.map((r) => r.value));
    expect(whole.rejected).toEqual([]);
    // one reading's text, in pieces or whole, is what a lone reading's answer writes
    const one = telemetryItemJson(overWire({ $case: 'readings_ingested', value: { ...value, created: 1, readings: value.readings.slice(0, 1) } }).item);
    if (typeof one !== 'string') throw new Error('a small answer is one string');
    const reading = one.slice(one.indexOf('[') + 1, one.indexOf('],"rejected"'));
    expect(jsonString(text)).toContain(`"readings":[${reading},`);
  });

  it('writes a JSON array in pieces only when it is large', () => {
    expect(jsonArray([1, 2, 3], String)).toBe('[1,2,3]');
    expect(jsonArray([], String)).toBe('[]');
    const long = 'x'.repeat(1000);
    const big = jsonArray(
      Array.from({ length: 100 }, () => long),
      (s) => JSON.stringify(s),
    );
    expect(Array.isArray(big)).toBe(true);
    expect(JSON.parse(jsonString(big))).toHaveLength(100);
  });

  it('refuses to write an answer that names no resource', () => {
    expect(() => telemetryItemJson(undefined)).toThrow();
    expect(telemetryListJson(undefined)).toBe('[]');
  });
});
