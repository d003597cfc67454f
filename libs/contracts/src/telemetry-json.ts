// Written by hand: how the telemetry service's resources (lab.telemetry.v1) map
// to and from the JSON the public API has always answered, as PostgreSQL rendered
// it with json_build_object in services/telemetry. The service builds the
// messages from those rows; the gateway writes them back as that JSON: fields in
// the same order, absent ones null, timestamps as PostgreSQL writes them, floats
// (float8 columns) with PostgreSQL's digits. Written by string concatenation, field
// by field: readings are ingested and listed 500 at a time, and their answer is
// on the hot path of the service.
import type { Timestamp } from './google/protobuf/timestamp.js';
import {
  ConnectorStatus,
  RejectionCode,
  type ChartPoint,
  type ChartSeries,
  type Connector,
  type Device,
  type ItemResponse,
  type ListResponse,
  type Point,
  type Reading,
  type ReadingsIngested,
  type RejectedReading,
  type Result,
  type ResultChart,
} from './lab/telemetry/v1/telemetry.js';
import { jsonArray, jsonString, JsonWriter, type JsonText } from './json-text.js';
import { enumWords, messageFromRow, messageShape, timestampFromText, timestampText, type RecordObject } from './record-json.js';

/** A double as PostgreSQL's float8 output writes it (shortest exact digits, exponent outside 1e-4..1e15). */
export function pgFloat(x: number): string {
  if (x === 0) return Object.is(x, -0) ? '-0' : '0';
  const a = Math.abs(x);
  if (a >= 1e-4 && a < 1e15) return String(x);
  const e = x.toExponential();
  const at = e.indexOf('e');
  const exp = Number(e.slice(at + 1));
  return `${e.slice(0, at)}e${exp < 0 ? '-' : '+'}${String(Math.abs(exp)).padStart(2, '0')}`;
}

const REJECTION = enumWords<RejectionCode>(RejectionCode, 'REJECTION_CODE_');
const STATUS = enumWords<ConnectorStatus>(ConnectorStatus, 'CONNECTOR_STATUS_');

/** The words the API writes for a rejection's code. */
export type RejectionWord = 'point_not_found' | 'point_inactive' | 'validation_failed';
export const rejectionCode = (word: RejectionWord): RejectionCode => REJECTION.value(word);

// ---- JSON text pieces (null for an absent field)

/** a text of the client's: escaped as PostgreSQL's JSON output escapes it (the same set as JSON.stringify) */
const str = (s: string | undefined): string => (s === undefined ? 'null' : JSON.stringify(s));
/** a UUID or another text the database made (hex digits and dashes): nothing to escape */
const bare = (s: string | undefined): string => (s === undefined ? 'null' : `"${s}"`);
const float = (x: number | undefined): string => (x === undefined ? 'null' : pgFloat(x));
/**
 * A writer of times that keeps the last one it wrote: the readings of an ingest
 * share their created_at (and mostly their measured_at), and a list's neighbours
 * often do, so most readings skip the digit work. One per field: a reading
 * writes two times, and one shared cache would miss on every one of them.
 */
function timeWriter(): (t: Timestamp | undefined) => string {
  let seconds = NaN;
  let nanos = NaN;
  let text = '';
  return (t) => {
    if (t === undefined) return 'null';
    if (t.seconds !== seconds || t.nanos !== nanos) {
      seconds = t.seconds;
      nanos = t.nanos;
      text = `"${timestampText(t)}"`;
    }
    return text;
  };
}
const time = timeWriter();
const measuredTime = timeWriter();
const createdTime = timeWriter();

/** A writer of a client's text that keeps the last one: a page's readings mostly repeat their point's words. */
function textWriter(): (s: string | undefined) => string {
  let last: string | undefined;
  let text = 'null';
  return (s) => {
    if (s !== last) {
      last = s;
      text = str(s);
    }
    return text;
  };
}
const codeText = textWriter();
const parameterText = textWriter();
const unitText = textWriter();

/** free-form JSON (jsonb): as JSON.stringify writes it (jsonb's spaces after ':' and ',' are gone) */
const free = (v: unknown): string => (v === undefined ? 'null' : JSON.stringify(v));
/** a number of a jsonb document (a result's value): as JavaScript writes it */
const num = (x: number): string => String(x);

// ---- from PostgreSQL's rows (json_build_object, parsed) to messages: the telemetry service

const POINT = messageShape(['created_at', 'updated_at']);
const DEVICE = messageShape(['created_at', 'updated_at']);
const RESULT = messageShape(['measured_at', 'created_at']);
const CONNECTOR = messageShape(['last_seen_at', 'created_at', 'updated_at']);

export const pointFromRow = (row: RecordObject): Point => messageFromRow(POINT, row) as unknown as Point;
export const deviceFromRow = (row: RecordObject): Device => messageFromRow(DEVICE, row) as unknown as Device;
/** values and raw_file map as they are (a value's unit absent when not given, raw_file null when none) */
export const resultFromRow = (row: RecordObject): Result => messageFromRow(RESULT, row) as unknown as Result;

export function connectorFromRow(row: RecordObject): Connector {
  const c = messageFromRow(CONNECTOR, row);
  c.status = STATUS.value(row.status);
  return c as unknown as Connector;
}

/**
 * A reading as the list query rendered it. Written out rather than through
 * messageFromRow: a page holds up to 500, and one object literal of a fixed
 * shape is cheaper than a loop over each row's keys.
 */
export function readingFromRow(r: RecordObject): Reading {
  return {
    id: r.id as string,
    point_id: r.point_id as string,
    external_code: (r.external_code as string | null) ?? undefined,
    parameter: r.parameter as string,
    value: r.value as number,
    unit: r.unit as string,
    limit_min: (r.limit_min as number | null) ?? undefined,
    limit_max: (r.limit_max as number | null) ?? undefined,
    is_breach: r.is_breach as boolean,
    measured_at: timestampFromText(r.measured_at as string),
    sample_id: (r.sample_id as string | null) ?? undefined,
    notes: (r.notes as string | null) ?? undefined,
    created_by: (r.created_by as string | null) ?? undefined,
    created_at: timestampFromText(r.created_at as string),
  };
}

/** A result's chart as PostgreSQL rendered it (every point's x is the result's measured_at: read once). */
export function resultChartFromRow(row: RecordObject): ResultChart {
  const text = row.measured_at as string;
  const measured = timestampFromText(text);
  const at = (x: string): Timestamp => (x === text ? measured : timestampFromText(x));
  return {
    result_id: row.result_id as string,
    device_id: (row.device_id as string | null) ?? undefined,
    measured_at: measured,
    series: (row.series as RecordObject[]).map((s): ChartSeries => ({
      name: s.name as string,
      unit: (s.unit as string | null) ?? undefined,
      points: (s.points as { x: string; y: number }[]).map((p): ChartPoint => ({ x: at(p.x), y: p.y })),
    })),
  };
}

// ---- from messages to the JSON clients see: the gateway

export const pointJson = (p: Point): string =>
  `{"id":${bare(p.id)},"external_code":${str(p.external_code)},"parameter":${str(p.parameter)},"unit":${str(p.unit)},` +
  `"limit_min":${float(p.limit_min)},"limit_max":${float(p.limit_max)},"room_id":${bare(p.room_id)},"equipment_id":${bare(p.equipment_id)},` +
  `"active":${p.active},"created_at":${time(p.created_at)},"updated_at":${time(p.updated_at)}}`;

export const readingJson = (r: Reading): string =>
  `{"id":"${r.id}","point_id":"${r.point_id}","external_code":${codeText(r.external_code)},"parameter":${parameterText(r.parameter)},` +
  `"value":${pgFloat(r.value)},"unit":${unitText(r.unit)},"limit_min":${float(r.limit_min)},"limit_max":${float(r.limit_max)},` +
  `"is_breach":${r.is_breach},"measured_at":${measuredTime(r.measured_at)},"sample_id":${bare(r.sample_id)},"notes":${str(r.notes)},` +
  `"created_by":${bare(r.created_by)},"created_at":${createdTime(r.created_at)}}`;

/** A rejection as the ingest answer shows it: the point's fields only when the item named them. */
export function rejectedJson(r: RejectedReading): string {
  let out = `{"index":${r.index},"code":"${REJECTION.word(r.code)}","message":${str(r.message)}`;
  if (r.point_id !== undefined) out += `,"point_id":${str(r.point_id)}`;
  if (r.external_code !== undefined) out += `,"external_code":${str(r.external_code)}`;
  return `${out}}`;
}

/**
 * An ingest answer: each reading written as a list writes it (readingJson's
 * fields, in its order), from its own values, its point's (sent once) and the
 * batch's creation. The parts every reading of a point shares are written once.
 */
export function readingsIngestedJson(a: ReadingsIngested): JsonText {
  const tail = `,"created_by":${bare(a.created_by)},"created_at":${createdTime(a.created_at)}}`;
  const points = a.points.map((p) => ({
    head: `","point_id":"${p.point_id}","external_code":${str(p.external_code)},"parameter":${str(p.parameter)},"value":`,
    unit: str(p.unit),
    limits: `,"limit_min":${float(p.limit_min)},"limit_max":${float(p.limit_max)},"is_breach":`,
  }));
  const out = new JsonWriter().add(`{"created":${a.created},"breaches":${a.breaches},"readings":`);
  out.array(a.readings, (r) => {
    const p = points[r.point];
    if (!p) throw new Error(`an ingested reading names point ${r.point} of ${points.length}`);
    return (
      `{"id":"${r.id}${p.head}${pgFloat(r.value)},"unit":${r.unit === undefined ? p.unit : str(r.unit)}${p.limits}${r.is_breach}` +
      `,"measured_at":${measuredTime(r.measured_at)},"sample_id":${bare(r.sample_id)},"notes":${str(r.notes)}${tail}`
    );
  });
  return out.add(`,"rejected":${listJson(a.rejected, rejectedJson)}}`).text();
}

export const deviceJson = (d: Device): string =>
  `{"id":${bare(d.id)},"name":${str(d.name)},"identifier":${str(d.identifier)},"kind":${str(d.kind)},"manufacturer":${str(d.manufacturer)},` +
  `"model":${str(d.model)},"serial_number":${str(d.serial_number)},"connector_id":${bare(d.connector_id)},"metadata":${free(d.metadata)},` +
  `"created_by":${bare(d.created_by)},"created_at":${time(d.created_at)},"updated_at":${time(d.updated_at)}}`;

export function resultJson(r: Result): string {
  // a value's keys in jsonb's order (by length, then bytewise), as the stored array was written
  const values = listJson(r.values, (v) => `{"name":${str(v.name)},${v.unit === undefined ? '' : `"unit":${str(v.unit)},`}"value":${num(v.value)}}`);
  const f = r.raw_file;
  const raw = f
    ? `{"id":${bare(f.id)},"filename":${str(f.filename)},"size":${f.size},"sha256":${str(f.sha256)},"content_type":${str(f.content_type)}}`
    : 'null';
  return (
    `{"id":${bare(r.id)},"device_id":${bare(r.device_id)},"device_identifier":${str(r.device_identifier)},"sample_id":${bare(r.sample_id)},` +
    `"sample_ref":${str(r.sample_ref)},"measured_at":${time(r.measured_at)},"values":${values},"metadata":${free(r.metadata)},` +
    `"raw_file":${raw},"created_by":${bare(r.created_by)},"created_at":${time(r.created_at)}}`
  );
}

export function resultChartJson(c: ResultChart): string {
  const series = listJson(
    c.series,
    (s) => `{"name":${str(s.name)},"unit":${str(s.unit)},"points":${listJson(s.points, (p) => `{"x":${time(p.x)},"y":${num(p.y)}}`)}}`,
  );
  return `{"result_id":${bare(c.result_id)},"device_id":${bare(c.device_id)},"measured_at":${time(c.measured_at)},"series":${series}}`;
}

export const connectorJson = (c: Connector): string =>
  `{"id":${bare(c.id)},"name":${str(c.name)},"version":${str(c.version)},"host":${str(c.host)},"last_seen_at":${time(c.last_seen_at)},` +
  `"status":"${STATUS.word(c.status)}","device_count":${c.device_count},"created_by":${bare(c.created_by)},` +
  `"created_at":${time(c.created_at)},"updated_at":${time(c.updated_at)}}`;

/** A JSON array inside another text (a reading's rejections, a chart's points): one string. */
const listJson = <T>(list: readonly T[], one: (x: T) => string): string => jsonString(jsonArray(list, one));

/** The resource of a single answer as the JSON object clients see. */
export function telemetryItemJson(item: ItemResponse['item']): JsonText {
  switch (item?.$case) {
    case 'point':
      return pointJson(item.value);
    case 'readings_ingested':
      return readingsIngestedJson(item.value);
    case 'device':
      return deviceJson(item.value);
    case 'result':
      return resultJson(item.value);
    case 'result_chart':
      return resultChartJson(item.value);
    case 'connector':
      return connectorJson(item.value);
    case 'connector_heartbeat': {
      const { connector, devices_synced } = item.value;
      return `${connectorJson(connector!).slice(0, -1)},"devices_synced":${devices_synced}}`;
    }
    case undefined:
      throw new Error('a telemetry answer without its resource');
  }
}

/** A page's records as the JSON array clients see (empty when the page names no resource). */
export function telemetryListJson(page: ListResponse['page']): JsonText {
  switch (page?.$case) {
    case 'points':
      return jsonArray(page.value.points, pointJson);
    case 'readings':
      return jsonArray(page.value.readings, readingJson);
    case 'devices':
      return jsonArray(page.value.devices, deviceJson);
    case 'results':
      return jsonArray(page.value.results, resultJson);
    case 'connectors':
      return jsonArray(page.value.connectors, connectorJson);
    case undefined:
      return '[]';
  }
}
