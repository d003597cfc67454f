// Written by hand: how a typed record (lab.common.v1.Record) maps to and from
// the JSON the public API has always answered. Both sides use it: the records
// engine builds messages from rows as PostgreSQL rendered them, and the gateway
// (and every other reader of records) turns messages back into that JSON.
import type { Record as RecordMessage } from './lab/common/v1/records.js';
import type { Timestamp } from './google/protobuf/timestamp.js';
import type { ExperimentSignature, SignedExperiment } from './lab/notebook/v1/notebook.js';
import type { Experiment } from './lab/notebook/v1/records.js';
import { jsonArray, type JsonText } from './json-text.js';

/** The case of lab.common.v1.Record that holds a resource's message. */
export type RecordCase = NonNullable<RecordMessage['kind']>['$case'];

/** A record as clients see it. */
export type RecordObject = { [field: string]: unknown };

/** What sets a message apart from plain JSON, for the readers and writers below. */
export interface MessageShape {
  /** google.protobuf.Timestamp fields */
  timestamps: ReadonlySet<string>;
  /** decimal text (PostgreSQL numeric), answered as a JSON number written as stored */
  decimals: ReadonlySet<string>;
  /** a free-form document: this Struct field's keys are shown between the ids and the authorship fields */
  flatten?: string;
}

/** The shape of a message with these Timestamp and decimal fields. */
export const messageShape = (timestamps: string[], decimals: string[] = []): MessageShape => ({
  timestamps: new Set(timestamps),
  decimals: new Set(decimals),
});

/** lab.notifications.v1.Notification */
export const NOTIFICATION_SHAPE = messageShape(['read_at', 'created_at']);

const STAMPS = ['created_at', 'updated_at'];
const shape = (timestamps: string[] = [], decimals: string[] = [], flatten?: string): MessageShape => ({
  timestamps: new Set([...STAMPS, ...timestamps]),
  decimals: new Set(decimals),
  flatten,
});

/**
 * What sets each record message apart from plain JSON: its Timestamp and
 * decimal fields. Every other field maps as it is (a Struct is already the
 * plain object, an absent optional is null).
 */
const SHAPES: { [C in RecordCase]: MessageShape } = {
  sample: shape(),
  project: shape(),
  experiment: shape(['signed_at']),
  reagent: shape(),
  stock_item: shape([], ['quantity', 'package_size_full', 'package_size_current', 'purchase_price', 'min_stock']),
  stock_movement: shape([], ['quantity_delta', 'quantity_after']),
  inventory: shape(['closed_at']),
  equipment: shape(),
  maintenance_log: shape(),
  usage_session: shape(['started_at', 'ended_at']),
  calibration: shape([], [], 'data'),
  qualification: shape([], [], 'data'),
  remote_link: shape(),
};

const TIME = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d(?::?\d\d)?)$/;

/**
 * A timestamp as PostgreSQL writes it in JSON ("2026-01-01T10:00:00.123456+00:00",
 * the fraction without trailing zeros, none when whole) as a Timestamp, to the
 * nanosecond given. The UTC form every service's session writes is read digit by
 * digit (two per record on every answer: Date.parse and a regular expression were
 * a tenth of a list's CPU); any other offset goes the general way.
 */
export function timestampFromText(text: string): Timestamp {
  return utcFromText(text) ?? generalFromText(text);
}

function generalFromText(text: string): Timestamp {
  const m = TIME.exec(text);
  if (!m) throw new Error(`not a timestamp: ${text}`);
  const millis = Date.parse(m[1]! + m[3]!);
  if (Number.isNaN(millis)) throw new Error(`not a timestamp: ${text}`);
  return { seconds: millis / 1000, nanos: m[2] ? Number(m[2].padEnd(9, '0')) : 0 };
}

/** Digits at [i, i + n) as a number; NaN when any is not a digit. */
function digits(text: string, i: number, n: number): number {
  let v = 0;
  for (let k = i; k < i + n; k++) {
    const c = text.charCodeAt(k) - 48;
    if (c < 0 || c > 9) return NaN;
    v = v * 10 + c;
  }
  return v;
}

/** Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil). */
function daysFromCivil(y: number, m: number, d: number): number {
  const yy = m <= 2 ? y - 1 : y;
  const era = Math.floor(yy / 400);
  const yoe = yy - era * 400;
  const doy = Math.floor((153 * (m + (m > 2 ? -3 : 9)) + 2) / 5) + d - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146097 + doe - 719468;
}

/** YYYY-MM-DDTHH:MM:SS[.f{1,9}]+00:00 (or Z), or undefined for any other form. */
function utcFromText(text: string): Timestamp | undefined {
  const n = text.length;
  if (
    n < 20 ||
    text.charCodeAt(4) !== 45 ||
    text.charCodeAt(7) !== 45 ||
    text.charCodeAt(10) !== 84 ||
    text.charCodeAt(13) !== 58 ||
    text.charCodeAt(16) !== 58
  )
    return undefined;
  let end = n;
  if (text.endsWith('+00:00')) end = n - 6;
  else if (text.charCodeAt(n - 1) === 90) end = n - 1;
  else return undefined;
  const [y, mo, d, h, mi, s] = [digits(text, 0, 4), digits(text, 5, 2), digits(text, 8, 2), digits(text, 11, 2), digits(text, 14, 2), digits(text, 17, 2)];
  if (!(y >= 0 && mo >= 1 && mo <= 12 && d >= 1 && d <= 31 && h <= 23 && mi <= 59 && s <= 59)) return undefined;
  let nanos = 0;
  if (end > 19) {
    const f = end - 20;
    if (text.charCodeAt(19) !== 46 || f < 1 || f > 9) return undefined;
    nanos = digits(text, 20, f) * 10 ** (9 - f);
    if (Number.isNaN(nanos)) return undefined;
  } else if (end !== 19) return undefined;
  // a day past the month's end (Feb 30) is not a date: the general way refuses it
  const days = daysFromCivil(y, mo, d);
  if (d > 28 && d > (mo === 12 ? 31 : daysFromCivil(y, mo + 1, 1) - daysFromCivil(y, mo, 1))) return undefined;
  return { seconds: days * 86400 + h * 3600 + mi * 60 + s, nanos };
}

const TWO = Array.from({ length: 100 }, (_, i) => (i < 10 ? `0${i}` : String(i)));

/** YYYY-MM-DDTHH:MM:SS of whole seconds since the epoch, UTC (civil_from_days; years 0 to 9999). */
function utcSecondsText(total: number): string {
  const days = Math.floor(total / 86400);
  let rem = total - days * 86400;
  const h = Math.floor(rem / 3600);
  rem -= h * 3600;
  const mi = Math.floor(rem / 60);
  const s = rem - mi * 60;
  const z = days + 719468;
  const era = Math.floor(z / 146097);
  const doe = z - era * 146097;
  const yoe = Math.floor((doe - Math.floor(doe / 1460) + Math.floor(doe / 36524) - Math.floor(doe / 146096)) / 365);
  const doy = doe - (365 * yoe + Math.floor(yoe / 4) - Math.floor(yoe / 100));
  const mp = Math.floor((5 * doy + 2) / 153);
  const d = doy - Math.floor((153 * mp + 2) / 5) + 1;
  const m = mp < 10 ? mp + 3 : mp - 9;
  const y = yoe + era * 400 + (m <= 2 ? 1 : 0);
  return `${String(y).padStart(4, '0')}-${TWO[m]}-${TWO[d]}T${TWO[h]}:${TWO[mi]}:${TWO[s]}`;
}

/** YYYY-MM-DDTHH:MM:SS of a Timestamp's seconds, UTC (years outside 0 to 9999 through Date). */
function wholeSecondsText(seconds: number): string {
  const s = Math.floor(seconds);
  return s >= -62167219200 && s < 253402300800 ? utcSecondsText(s) : new Date(s * 1000).toISOString().slice(0, 19);
}

/**
 * A Timestamp written as PostgreSQL writes a timestamptz in JSON with the
 * session in UTC: to the microsecond, trailing zeros of the fraction dropped,
 * offset +00:00. Answers keep exactly the text they had when PostgreSQL wrote it.
 */
export function timestampText(t: Timestamp): string {
  const whole = wholeSecondsText(t.seconds);
  let micros = Math.trunc((t.nanos || 0) / 1000);
  if (!micros) return `${whole}+00:00`;
  let width = 6;
  while (micros % 10 === 0) {
    micros /= 10;
    width--;
  }
  return `${whole}.${String(micros).padStart(width, '0')}+00:00`;
}

/**
 * The record message of a row as PostgreSQL rendered it (row_to_json text):
 * nulls left out, timestamps as Timestamps, decimals as the digits PostgreSQL
 * wrote (read from the text itself, so 12.50 stays 12.50).
 */
export function recordFromRowJson(kind: RecordCase, json: string): RecordMessage {
  return { kind: { $case: kind, value: messageFromRowJson(SHAPES[kind], json) } } as unknown as RecordMessage;
}

/** The fields of a message of this shape from a row as PostgreSQL rendered it (as recordFromRowJson). */
export function messageFromRowJson(s: MessageShape, json: string): RecordObject {
  const row = (
    s.decimals.size
      ? JSON.parse(json, (key, value: unknown, context?: { source?: string }) =>
          typeof value === 'number' && s.decimals.has(key) && context?.source !== undefined ? context.source : value,
        )
      : JSON.parse(json)
  ) as RecordObject;
  return messageFromRow(s, row);
}

/** The fields of a message of this shape from a row already parsed (nulls left out, timestamps as Timestamps). */
export function messageFromRow(s: MessageShape, row: RecordObject): RecordObject {
  const value: RecordObject = {};
  for (const key in row) {
    const v = row[key];
    if (v === null) continue;
    value[key] = s.timestamps.has(key) ? timestampFromText(v as string) : v;
  }
  return value;
}

/** The record's fields in the order clients see them (a document's data flattened in). */
function entries(record: RecordMessage): { s: MessageShape; fields: RecordObject } | undefined {
  const kind = record.kind;
  if (!kind) return undefined;
  const s = SHAPES[kind.$case];
  const fields = kind.value as unknown as RecordObject;
  if (!s.flatten) return { s, fields };
  const { [s.flatten]: data, created_by, created_at, updated_at, ...ids } = fields;
  return { s, fields: { ...ids, ...(data as RecordObject | undefined), created_by, created_at, updated_at } };
}

/**
 * A record as the JSON text clients have always been answered: fields in
 * column order, absent ones null, timestamps as PostgreSQL writes them,
 * decimals as numbers with their stored digits. Written field by field (no
 * intermediate object): it is on the path of every record read. The record is
 * one as decoded from the wire, which holds every field of its message (unset
 * ones undefined); one made by recordFromRowJson lacks the null ones.
 */
export function recordJson(record: RecordMessage): string {
  const e = entries(record);
  return e ? messageJson(e.s, e.fields) : 'null';
}

/** A message of this shape as JSON text, as recordJson writes a record. */
export function messageJson(s: MessageShape, fields: RecordObject): string {
  let out = '';
  for (const key in fields) {
    const v = fields[key];
    const text =
      v === undefined || v === null
        ? 'null'
        : typeof v === 'string'
          ? s.decimals.has(key)
            ? v
            : JSON.stringify(v)
          : s.timestamps.has(key)
            ? `"${timestampText(v as Timestamp)}"`
            : JSON.stringify(v);
    out += (out ? ',' : '{') + keyText(key) + text;
  }
  return out ? `${out}}` : '{}';
}

/** `"key":` of each field name, written once: the names are few and every record repeats them. */
const KEY_TEXT = new Map<string, string>();
function keyText(key: string): string {
  let text = KEY_TEXT.get(key);
  if (text === undefined) {
    text = `${JSON.stringify(key)}:`;
    // a flattened document's own keys are the client's: not kept beyond a bound
    if (KEY_TEXT.size < 10_000) KEY_TEXT.set(key, text);
  }
  return text;
}

/** Records as a JSON array text (a list page's data). */
export const recordsJson = (list: RecordMessage[]): JsonText => jsonArray(list, recordJson);

/** A record as the object clients see (JSON.parse of recordJson, decimals as numbers). */
export function recordObject(record: RecordMessage): RecordObject {
  const e = entries(record);
  return e ? messageObject(e.s, e.fields) : {};
}

/** A message of this shape as the object clients see, as recordObject. */
export function messageObject(s: MessageShape, fields: RecordObject): RecordObject {
  const out: RecordObject = {};
  for (const key in fields) {
    const v = fields[key];
    out[key] = v === undefined || v === null ? null : s.timestamps.has(key) ? timestampText(v as Timestamp) : s.decimals.has(key) ? Number(v) : v;
  }
  return out;
}

/** An experiment (the notebook's own RPCs answer it outside Record) as clients see it. */
export const experimentJson = (e: Experiment): string => recordJson({ kind: { $case: 'experiment', value: e } });

/** A signature's time as the notebook has always written it: UTC, always six digits of fraction, "Z". */
export function utcMicrosText(t: Timestamp): string {
  return `${wholeSecondsText(t.seconds)}.${String(Math.trunc((t.nanos || 0) / 1000)).padStart(6, '0')}Z`;
}

/** A signature of an experiment's manifest as clients see it. */
export function signatureObject(s: ExperimentSignature): RecordObject {
  return {
    id: s.id,
    experiment_id: s.experiment_id,
    meaning: s.meaning,
    signer_id: s.signer_id,
    signer_name: s.signer_name ?? null,
    signed_at: s.signed_at ? utcMicrosText(s.signed_at) : null,
    content_hash: s.content_hash ?? null,
    hash_algorithm: s.hash_algorithm,
    content_matches: s.content_matches ?? null,
  };
}

/** A manifest as a JSON array text. */
export const signaturesJson = (list: ExperimentSignature[]): string => JSON.stringify(list.map(signatureObject));

/** A signed experiment as clients see it: the experiment's fields, then its manifest as `signatures`. */
export function signedExperimentJson(m: SignedExperiment): string {
  const experiment = experimentJson(m.experiment!);
  return `${experiment.slice(0, -1)},"signatures":${signaturesJson(m.signatures)}}`;
}

/** An enum's values and the lowercase words the API writes for them (ORDER_STATUS_RECEIVED: received). */
export function enumWords<E extends number>(e: { [name: string]: string | number }, prefix: string) {
  const words = new Map<number, string>();
  const values = new Map<string, number>();
  for (const [name, v] of Object.entries(e)) {
    if (typeof v !== 'number' || !name.startsWith(prefix) || name.endsWith('_UNSPECIFIED')) continue;
    const word = name.slice(prefix.length).toLowerCase();
    words.set(v, word);
    values.set(word, v);
  }
  return {
    word(v: E): string {
      const w = words.get(v);
      if (w === undefined) throw new Error(`no ${prefix}value ${v}`);
      return w;
    },
    value(word: unknown): E {
      const v = values.get(String(word));
      if (v === undefined) throw new Error(`no ${prefix}value for ${String(word)}`);
      return v as E;
    },
  };
}
