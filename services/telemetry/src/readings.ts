import { randomBytes } from 'node:crypto';
import { sql, type SQL } from 'drizzle-orm';
import { z } from 'zod';
import { pgFloat, readingFromRow, rejectionCode, timestampFromText, type Timestamp, type telemetry } from '@lab/contracts';
import { DomainError, fieldIssues, pipelined, rows, structBody, validationFailed, type CallerContext, type Emitter, type ServiceDeps, type Tx } from '@lab/kit';
import { createdAnswer, dateTime, finite, limitParam, orgOf, parsedList, parseQuery, text, uuid, where } from './common.js';

const MAX_BATCH = 500;

/** One ingest item (spec: Environmental reading). */
export const item = z
  .object({
    point_id: uuid.optional(),
    external_code: text(100).optional(),
    value: finite,
    unit: text(32).optional(),
    measured_at: dateTime.optional(),
    sample_id: uuid.optional(),
    notes: z.string().max(2000).optional(),
  })
  .strict()
  .refine((i) => i.point_id !== undefined || i.external_code !== undefined, {
    error: 'point_id or external_code is required',
    path: ['point_id'],
  });
type Item = z.infer<typeof item>;

const listQuery = z
  .object({
    point_id: uuid.optional(),
    since: dateTime.optional(),
    breaches: z.enum(['true', 'false']).optional(),
    limit: limitParam(100, 500),
  })
  .strict();

/**
 * What the reading routes take (the gateway documents them from these). An ingest
 * body is one reading, or `readings` holding 1 to 500; each reading is judged on
 * its own (a bad one is rejected in the answer, not the whole batch), so this
 * schema only describes the body: `itemsOf` and `item` are what check it.
 */
export const readingSchemas = {
  ingest: z.union([item, z.object({ readings: z.array(item).min(1).max(MAX_BATCH) }).strict()]),
  list: listQuery,
};

interface Rejected {
  index: number;
  code: 'point_not_found' | 'point_inactive' | 'validation_failed';
  message: string;
  point_id?: string;
  external_code?: string;
}

/** A point row of the ingest lookup, with the transaction's clock and the given times rendered by PostgreSQL. */
interface PointRow {
  now: string | null;
  stamps: string | null;
  id: string | null;
  external_code: string | null;
  parameter: string;
  unit: string;
  limit_min: number | null;
  limit_max: number | null;
  active: boolean;
}

type FoundPoint = PointRow & { id: string };

interface Accepted {
  item: Item;
  point: FoundPoint;
  /** as PostgreSQL renders the stored value (the breach event's), ... */
  measured_at: string;
  /** ... and read as the answer's Timestamp */
  measured: Timestamp;
}

/**
 * A reading as the API shows it, with its point's code and parameter (read by
 * readingFromRow); of readings r joined to their points p. Exported for the tests,
 * which hold the typed answer to what PostgreSQL renders.
 */
export const readingRow = sql`json_build_object(
  'id', r.id, 'point_id', r.point_id, 'external_code', p.external_code, 'parameter', p.parameter,
  'value', r.value, 'unit', r.unit, 'limit_min', r.limit_min, 'limit_max', r.limit_max, 'is_breach', r.is_breach,
  'measured_at', r.measured_at, 'sample_id', r.sample_id, 'notes', r.notes, 'created_by', r.created_by, 'created_at', r.created_at)`;

/** The items of a body: one reading object, or {readings: [...]} of 1 to 500. */
function itemsOf(given: Record<string, unknown> | undefined): unknown[] {
  const body = structBody(given);
  if (!('readings' in body)) return [body];
  const list = body.readings;
  const extra = Object.keys(body).filter((k) => k !== 'readings');
  if (extra.length) throw validationFailed(extra.map((k) => ({ path: k, message: 'unknown field beside readings' })));
  if (!Array.isArray(list) || list.length < 1 || list.length > MAX_BATCH) {
    throw validationFailed([{ path: 'readings', message: `must be an array of 1 to ${MAX_BATCH} readings` }]);
  }
  return list;
}

const rejectedMessage = (r: Rejected): telemetry.RejectedReading => ({
  index: r.index,
  code: rejectionCode(r.code),
  message: r.message,
  point_id: r.point_id,
  external_code: r.external_code,
});

const idOrCode = (i: { point_id?: string; external_code?: string }) => ({
  ...(i.point_id !== undefined ? { point_id: i.point_id } : {}),
  ...(i.external_code !== undefined ? { external_code: i.external_code } : {}),
});

/** What the raw item said about its point, for a rejection of an item that failed validation. */
function rawRef(raw: unknown): { point_id?: string; external_code?: string } {
  if (!raw || typeof raw !== 'object') return {};
  const r = raw as Record<string, unknown>;
  return idOrCode({
    point_id: typeof r.point_id === 'string' ? r.point_id.slice(0, 100) : undefined,
    external_code: typeof r.external_code === 'string' ? r.external_code.slice(0, 100) : undefined,
  });
}

const ITEM_KEYS = new Set(['point_id', 'external_code', 'value', 'unit', 'measured_at', 'sample_id', 'notes']);
const GUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A trimmed text of 1 to max characters, as text(max) accepts it; undefined when it would not. */
function quickText(v: unknown, max: number): string | undefined {
  if (typeof v !== 'string') return undefined;
  const t = v.trim();
  return t.length >= 1 && t.length <= max ? t : undefined;
}

/**
 * The common, valid item checked without zod (500 safeParse calls are a good part
 * of a batch's CPU). Accepts only what the zod schema accepts and yields the same
 * value; anything else returns undefined and goes through the schema, which gives
 * the error message.
 */
export function quickItem(r: unknown): Item | undefined {
  if (r === null || typeof r !== 'object' || Array.isArray(r)) return undefined;
  const o = r as Record<string, unknown>;
  for (const k in o) if (!ITEM_KEYS.has(k)) return undefined;
  const out: { -readonly [K in keyof Item]: Item[K] } = { value: 0 };
  if (typeof o.value !== 'number' || !Number.isFinite(o.value)) return undefined;
  out.value = o.value;
  if (o.point_id !== undefined) {
    if (typeof o.point_id !== 'string' || !GUID.test(o.point_id)) return undefined;
    out.point_id = o.point_id.toLowerCase();
  }
  if (o.external_code !== undefined) {
    const t = quickText(o.external_code, 100);
    if (t === undefined) return undefined;
    out.external_code = t;
  }
  if (out.point_id === undefined && out.external_code === undefined) return undefined;
  if (o.unit !== undefined) {
    const t = quickText(o.unit, 32);
    if (t === undefined) return undefined;
    out.unit = t;
  }
  if (o.measured_at !== undefined) {
    if (typeof o.measured_at !== 'string' || !dateTime.safeParse(o.measured_at).success) return undefined;
    out.measured_at = o.measured_at;
  }
  if (o.sample_id !== undefined) {
    if (typeof o.sample_id !== 'string' || !GUID.test(o.sample_id)) return undefined;
    out.sample_id = o.sample_id.toLowerCase();
  }
  if (o.notes !== undefined) {
    if (typeof o.notes !== 'string' || o.notes.length > 2000) return undefined;
    out.notes = o.notes;
  }
  return out;
}

type WellFormed = { isWellFormed(): boolean; toWellFormed(): string };
/** A lone surrogate reaches PostgreSQL as U+FFFD; the answer must show what was stored. */
const wellFormed = (s: string): string => ((s as unknown as WellFormed).isWellFormed() ? s : (s as unknown as WellFormed).toWellFormed());

/** The strings of an item as they will be stored. */
function storedStrings(i: Item): Item {
  const ok = (s: string | undefined) => s === undefined || (s as unknown as WellFormed).isWellFormed();
  if (ok(i.external_code) && ok(i.unit) && ok(i.notes)) return i;
  return {
    ...i,
    ...(i.external_code !== undefined ? { external_code: wellFormed(i.external_code) } : {}),
    ...(i.unit !== undefined ? { unit: wellFormed(i.unit) } : {}),
    ...(i.notes !== undefined ? { notes: wellFormed(i.notes) } : {}),
  };
}

/** An element of a PostgreSQL array literal: quoted, so any text is taken as it is. */
const quoted = (s: string): string => (s.includes('"') || s.includes('\\') ? `"${s.replace(/[\\"]/g, '\\$&')}"` : `"${s}"`);
/** An element that needs no quoting (UUIDs checked by the schema). */
const bare = (s: string): string => s;
/**
 * A PostgreSQL array literal passed as one text parameter: the same on node-postgres
 * and PGlite, and one parameter whatever the batch size.
 */
function pgArray<T>(xs: readonly (T | null)[], element: (x: T) => string): string {
  let out = '{';
  for (let k = 0; k < xs.length; k++) {
    const x = xs[k];
    out += (k ? ',' : '') + (x === null || x === undefined ? 'NULL' : element(x));
  }
  return `${out}}`;
}
/** What a batch's readings share of their point: sent to the insert once, written into each answer's reading. */
interface Shape {
  /** 1-based position in the batch's point arrays */
  n: number;
  external_code: string | undefined;
  limit_min: number | undefined;
  limit_max: number | undefined;
}

const HEX4 = Array.from({ length: MAX_BATCH }, (_, k) => k.toString(16).padStart(4, '0'));
let lastMs = 0;
let seq = 0;

/**
 * The first 28 hex digits of a batch's reading ids; reading k of the batch is this
 * plus k as 4 hex digits. UUIDv7: the time in ms, a 12-bit sequence in rand_a that
 * grows between batches of one millisecond, 46 random bits and the item counter in
 * rand_b. So ids increase in the order given, batch after batch, and PostgreSQL
 * builds them from this prefix rather than parsing 500 ids sent to it.
 */
export function batchIdBase(): string {
  const rnd = randomBytes(8);
  let ms = Date.now();
  if (ms > lastMs) seq = rnd.readUInt16BE(6) & 0x3ff;
  else if (++seq > 0xfff) {
    ms = lastMs + 1;
    seq = 0;
  } else ms = lastMs;
  lastMs = ms;
  const t = ms.toString(16).padStart(12, '0');
  const r = rnd.toString('hex');
  const variant = '89ab'[rnd[0]! & 3];
  return `${t.slice(0, 8)}-${t.slice(8)}-7${(seq | 0x1000).toString(16).slice(1)}-${variant}${r.slice(2, 5)}-${r.slice(5, 13)}`;
}

/** The items of a body judged one by one: those the schema accepts (stored strings), and the others' rejections. */
function checkItems(raw: unknown[]): { valid: { index: number; item: Item }[]; rejected: Rejected[] } {
  const rejected: Rejected[] = [];
  const valid: { index: number; item: Item }[] = [];
  for (let index = 0; index < raw.length; index++) {
    const r = raw[index];
    const fast = quickItem(r);
    if (fast) {
      valid.push({ index, item: storedStrings(fast) });
      continue;
    }
    const parsed = item.safeParse(r, { reportInput: true });
    if (parsed.success) valid.push({ index, item: storedStrings(parsed.data) });
    else {
      const issues = fieldIssues(parsed.error);
      const message = issues.map((i) => (i.path ? `${i.path}: ${i.message}` : i.message)).join('; ');
      rejected.push({ index, code: 'validation_failed', message, ...rawRef(r) });
    }
  }
  return { valid, rejected };
}

/** The points of a batch by id and by code, and the clock and given times as PostgreSQL renders them. */
interface Resolved {
  byId: Map<string, FoundPoint>;
  byCode: Map<string, FoundPoint>;
  /** the transaction's time: the stored default measured_at and created_at */
  now: string;
  nowTime: Timestamp;
  /** the given measured_at texts, each numbered (first seen first) ... */
  stamps: Map<string, number>;
  /** ... and rendered, and read as Timestamps, by that number */
  stampText: string[];
  stampTimes: Timestamp[];
}

/**
 * Resolves every point of the batch (and reads the clock, and renders the given
 * times) in one query. now() is the transaction's time, so it is the stored
 * default measured_at and created_at; PostgreSQL renders it and the given times,
 * as lists show them. The points are read under a key-share lock (the one the
 * readings' foreign key takes at the insert anyway, taken before instead): a
 * point being deleted is waited for and then not found (point_not_found), rather
 * than found here and gone at the insert (a foreign key error); and a delete that
 * comes after waits for these readings and sees them. The limits stored are the
 * ones read here (passed to the insert).
 */
async function resolvePoints(tx: Tx, org: string, valid: readonly { item: Item }[]): Promise<Resolved> {
  const ids = new Set<string>();
  const codes = new Set<string>();
  const stamps = new Map<string, number>();
  for (const { item: i } of valid) {
    if (i.point_id !== undefined) ids.add(i.point_id);
    else codes.add(i.external_code!);
    if (i.measured_at !== undefined && !stamps.has(i.measured_at)) stamps.set(i.measured_at, stamps.size);
  }
  // one row for the clock (id null), then one per point
  const found = await rows<PointRow>(
    tx,
    sql`with p as materialized (
        select p.id, p.external_code, p.parameter, p.unit, p.limit_min, p.limit_max, p.active
        from telemetry.environmental_points p
        where p.org_id = ${org}
          and (p.id = any(${pgArray([...ids], bare)}::uuid[]) or p.external_code = any(${pgArray([...codes], quoted)}::text[]))
        for key share of p
      )
      select to_json(now()) #>> '{}' as now,
             (select string_agg(to_json(s.t::timestamptz) #>> '{}', ',' order by s.n)
              from unnest(${pgArray([...stamps.keys()], quoted)}::text[]) with ordinality as s(t, n)) as stamps,
             null::uuid as id, null as external_code, null as parameter, null as unit,
             null::float8 as limit_min, null::float8 as limit_max, null::boolean as active
      union all
      select null, null, p.id, p.external_code, p.parameter, p.unit, p.limit_min, p.limit_max, p.active
      from p`,
  );
  const clock = found.find((r) => r.id === null)!;
  const now = clock.now!;
  // rendered timestamps hold no comma
  const stampText = clock.stamps ? clock.stamps.split(',') : [];
  const byId = new Map<string, FoundPoint>();
  const byCode = new Map<string, FoundPoint>();
  for (const row of found) {
    if (row.id === null) continue;
    const p = row as FoundPoint;
    // numbers whichever driver answered, as the insert and the answer are written from them
    // (node-postgres gives numeric columns as text, whatever FoundPoint says)
    /* eslint-disable @typescript-eslint/no-unnecessary-type-conversion -- see above */
    if (p.limit_min !== null) p.limit_min = Number(p.limit_min);
    if (p.limit_max !== null) p.limit_max = Number(p.limit_max);
    /* eslint-enable @typescript-eslint/no-unnecessary-type-conversion */
    byId.set(p.id, p);
    if (p.external_code !== null) byCode.set(p.external_code, p);
  }
  // read once each: the batch's readings share the clock and the few times given
  return { byId, byCode, now, nowTime: timestampFromText(now), stamps, stampText, stampTimes: stampText.map(timestampFromText) };
}

/** The valid items whose point is found and active, with their stored measured_at; the others added to `rejected`. */
function acceptItems(valid: readonly { index: number; item: Item }[], points: Resolved, rejected: Rejected[]): Accepted[] {
  const accepted: Accepted[] = [];
  for (const { index, item: i } of valid) {
    const p = i.point_id !== undefined ? points.byId.get(i.point_id) : points.byCode.get(i.external_code!);
    if (!p) {
      rejected.push({ index, code: 'point_not_found', message: 'no environmental point with this id or external_code', ...idOrCode(i) });
    } else if (!p.active) {
      rejected.push({ index, code: 'point_inactive', message: 'the environmental point is inactive', ...idOrCode(i) });
    } else if (i.measured_at === undefined) {
      accepted.push({ item: i, point: p, measured_at: points.now, measured: points.nowTime });
    } else {
      const k = points.stamps.get(i.measured_at)!;
      accepted.push({ item: i, point: p, measured_at: points.stampText[k]!, measured: points.stampTimes[k]! });
    }
  }
  rejected.sort((a, b) => a.index - b.index);
  return accepted;
}

/**
 * A batch as the insert takes it: per point once (its id, unit, limits, code and
 * parameter), per reading only its own values, as PostgreSQL array literals (a
 * batch is a few KB on the wire); and each reading's point's Shape, for the answer.
 */
interface BatchArrays {
  pts: FoundPoint[];
  used: Map<FoundPoint, Shape>;
  shapes: Shape[];
  pointIdx: string;
  values: string;
  units: (string | null)[];
  measured: (string | null)[];
  samples: (string | null)[];
  notes: (string | null)[];
}

function batchArrays(accepted: readonly Accepted[]): BatchArrays {
  const used = new Map<FoundPoint, Shape>();
  const shapeOf = (p: FoundPoint): Shape => {
    let sh = used.get(p);
    if (!sh) {
      sh = { n: used.size + 1, external_code: p.external_code ?? undefined, limit_min: p.limit_min ?? undefined, limit_max: p.limit_max ?? undefined };
      used.set(p, sh);
    }
    return sh;
  };
  const n = accepted.length;
  const shapes = new Array<Shape>(n);
  let pointIdx = '';
  let values = '';
  const units: (string | null)[] = [];
  const measured: (string | null)[] = [];
  const samples: (string | null)[] = [];
  const notes: (string | null)[] = [];
  for (let k = 0; k < n; k++) {
    const { item: i, point } = accepted[k]!;
    const sh = (shapes[k] = shapeOf(point));
    pointIdx += (k ? ',' : '') + String(sh.n);
    values += (k ? ',' : '') + pgFloat(i.value);
    // only the columns some item sets are sent; unnest pads the shorter arrays with NULL
    if (i.unit !== undefined) units[k] = i.unit;
    if (i.measured_at !== undefined) measured[k] = i.measured_at;
    if (i.sample_id !== undefined) samples[k] = i.sample_id;
    if (i.notes !== undefined) notes[k] = i.notes;
  }
  return { pts: [...used.keys()], used, shapes, pointIdx, values, units, measured, samples, notes };
}

/**
 * The statement storing the batch: one set-based insert of the arrays (limits
 * copied from the point rows read, is_breach computed by the database).
 */
function insertStatement(a: BatchArrays, idBase: string, org: string, caller: CallerContext): SQL {
  return sql`insert into telemetry.environmental_readings
      (id, org_id, point_id, value, unit, limit_min, limit_max, measured_at, sample_id, notes, created_by)
    select (${idBase}::text || lpad(to_hex(u.n - 1), 4, '0'))::uuid, ${org}::uuid, p.id, u.value, coalesce(u.unit, p.unit),
           p.limit_min, p.limit_max, coalesce(u.measured_at, now()), u.sample_id, u.notes, ${caller.user_id}::uuid
    from unnest(${`{${a.pointIdx}}`}::int[], ${`{${a.values}}`}::float8[], ${pgArray(a.units, quoted)}::text[],
                ${pgArray(a.measured, quoted)}::timestamptz[], ${pgArray(a.samples, bare)}::uuid[], ${pgArray(a.notes, quoted)}::text[])
           with ordinality as u(point, value, unit, measured_at, sample_id, notes, n)
    join unnest(${pgArray(
      a.pts.map((p) => p.id),
      bare,
    )}::uuid[], ${pgArray(
      a.pts.map((p) => p.unit),
      quoted,
    )}::text[], ${pgArray(
      a.pts.map((p) => p.limit_min),
      pgFloat,
    )}::float8[], ${pgArray(
      a.pts.map((p) => p.limit_max),
      pgFloat,
    )}::float8[])
           with ordinality as p(id, unit, limit_min, limit_max, n)
      on p.n = u.point`;
}

/** What a breach event's data says of its point, as JSON text: written once per point of a batch, not per breach. */
interface PointJson {
  /** point_id, external_code and parameter */
  point: string;
  unit: string;
  /** limit_min and limit_max */
  limits: string;
}
function pointJsonOf(p: FoundPoint, written: Map<FoundPoint, PointJson>): PointJson {
  let j = written.get(p);
  if (!j) {
    j = {
      point: `"point_id":${JSON.stringify(p.id)},"external_code":${JSON.stringify(p.external_code)},"parameter":${JSON.stringify(p.parameter)}`,
      unit: JSON.stringify(p.unit),
      limits: `"limit_min":${JSON.stringify(p.limit_min)},"limit_max":${JSON.stringify(p.limit_max)}`,
    };
    written.set(p, j);
  }
  return j;
}

/**
 * The data of a reading's environmental.breach event (spec: reading_id, point_id,
 * external_code, parameter, value, unit, limit_min, limit_max, measured_at) as
 * JSON text, what JSON.stringify makes of it: a third of a batch breaching made
 * an object, a message and an outbox row per breach most of the ingest's cost.
 */
function breachJson(id: string, a: Accepted, written: Map<FoundPoint, PointJson>): string {
  const p = pointJsonOf(a.point, written);
  const unit = a.item.unit === undefined ? p.unit : JSON.stringify(a.item.unit);
  return `{"reading_id":"${id}",${p.point},"value":${JSON.stringify(a.item.value)},"unit":${unit},${p.limits},"measured_at":${JSON.stringify(a.measured_at)}}`;
}

/**
 * The answer: each point once, each reading its point by index and its own
 * values, built from what was inserted rather than read back with RETURNING
 * (which cost PostgreSQL as much as the insert); is_breach by the generated
 * column's rule, on the same doubles; and each breach's event data as JSON text.
 */
function batchAnswer(
  accepted: readonly Accepted[],
  a: BatchArrays,
  idBase: string,
): { points: telemetry.IngestedPoint[]; readings: telemetry.IngestedReading[]; breaches: string[] } {
  const points = a.pts.map((p): telemetry.IngestedPoint => {
    const sh = a.used.get(p)!;
    return { point_id: p.id, external_code: sh.external_code, parameter: p.parameter, unit: p.unit, limit_min: sh.limit_min, limit_max: sh.limit_max };
  });
  const n = accepted.length;
  const readings = new Array<telemetry.IngestedReading>(n);
  const breaches: string[] = [];
  const written = new Map<FoundPoint, PointJson>();
  for (let k = 0; k < n; k++) {
    const { item: i, point: p, measured } = accepted[k]!;
    const id = idBase + HEX4[k]!;
    const breach = (p.limit_min !== null && i.value < p.limit_min) || (p.limit_max !== null && i.value > p.limit_max);
    if (breach) breaches.push(breachJson(id, accepted[k]!, written));
    // one literal of a fixed shape: only the reading's own values
    readings[k] = {
      id,
      point: a.shapes[k]!.n - 1,
      value: i.value,
      unit: i.unit,
      is_breach: breach,
      measured_at: measured,
      sample_id: i.sample_id,
      notes: i.notes,
    };
  }
  return { points, readings, breaches };
}

/**
 * Stores a batch's valid items in the caller's transaction: resolves their
 * points, stores the accepted ones with one statement (nothing waits for it: it
 * travels with the outbox rows and the COMMIT), emits their breach events as one
 * outbox row (Emitter.eventsJson) and one audit record. Undefined when no item
 * is accepted.
 */
async function storeBatch(
  tx: Tx,
  emit: Emitter,
  caller: CallerContext,
  org: string,
  valid: readonly { index: number; item: Item }[],
  rejected: Rejected[],
): Promise<telemetry.ItemResponse | undefined> {
  const resolved = await resolvePoints(tx, org, valid);
  const accepted = acceptItems(valid, resolved, rejected);
  if (!accepted.length) return undefined;
  const idBase = batchIdBase();
  const arrays = batchArrays(accepted);
  const { points, readings, breaches } = batchAnswer(accepted, arrays, idBase);
  pipelined(tx, () => tx.execute(insertStatement(arrays, idBase, org, caller)));
  emit.eventsJson('environmental.breach', org, breaches);
  emit.audit(org, {
    action: 'ingest',
    resource: 'environmental_readings',
    record_id: null,
    after: { created: accepted.length, breaches: breaches.length, rejected: rejected.length },
  });
  // the answer (rejected is final once the points are resolved); a keyed call's
  // receipt keeps it in this transaction
  const value: telemetry.ReadingsIngested = {
    created: accepted.length,
    breaches: breaches.length,
    points,
    readings,
    created_by: caller.user_id ?? undefined,
    created_at: resolved.nowTime,
    rejected: rejected.map(rejectedMessage),
  };
  return createdAnswer({ $case: 'readings_ingested', value });
}

export function readingHandlers(deps: ServiceDeps) {
  return {
    /**
     * Judges each item on its own (a bad one is rejected in the answer, not the
     * whole batch), then stores the accepted ones, their breach events and one
     * audit record in one transaction (storeBatch).
     */
    ingestReadings: async (req: telemetry.BodyRequest, caller: CallerContext): Promise<telemetry.ItemResponse> => {
      const org = orgOf(caller);
      const { valid, rejected } = checkItems(itemsOf(req.body));
      const out = valid.length
        ? await deps.outbox.write(
            caller,
            (tx, emit) => storeBatch(tx, emit, caller, org, valid, rejected),
            (res) => res,
          )
        : undefined;
      if (!out) {
        throw DomainError.unprocessable('every reading was rejected', 'all_readings_rejected', { rejected });
      }
      return out;
    },

    listReadings: async (req: telemetry.QueryRequest, caller: CallerContext): Promise<telemetry.ListResponse> => {
      const org = orgOf(caller);
      const q = parseQuery(listQuery, req.query);
      const cond = where([
        sql`r.org_id = ${org}`,
        q.point_id ? sql`r.point_id = ${q.point_id}` : undefined,
        q.since ? sql`r.measured_at >= ${q.since}::timestamptz` : undefined,
        q.breaches === 'true' ? sql`r.is_breach` : q.breaches === 'false' ? sql`not r.is_breach` : undefined,
      ]);
      const [r] = await deps.db.rows<{ json: string }>(
        sql`select coalesce(json_agg(${readingRow} order by r.measured_at desc, r.id desc), '[]')::text as json
            from (select * from telemetry.environmental_readings r where ${cond}
                  order by r.measured_at desc, r.id desc limit ${q.limit}) r
            join telemetry.environmental_points p on p.org_id = r.org_id and p.id = r.point_id`,
      );
      const readings = parsedList(r!.json).map(readingFromRow);
      return { page: { $case: 'readings', value: { readings } }, limit: q.limit, offset: 0 };
    },
  };
}
