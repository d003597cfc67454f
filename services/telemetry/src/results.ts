import { sql, type SQL } from 'drizzle-orm';
import { z } from 'zod';
import { resultChartFromRow, resultFromRow, type telemetry } from '@lab/contracts';
import { DomainError, newId, rows, validationFailed, type CallerContext, type Emitter, type Executor, type ServiceDeps, type Tx } from '@lab/kit';
import { assertMay, grantsScope } from '@lab/permissions';
import { assertMayActFor, deviceScope } from './access.js';
import {
  createdAnswer,
  dateTime,
  finite,
  freeObject,
  idOf,
  limitParam,
  offsetParam,
  orgOf,
  parseBody,
  parsed,
  parsedList,
  parseQuery,
  text,
  uuid,
  where,
} from './common.js';
import { connectorForNewDevice, insertDevice, insertDeviceIfNew } from './devices.js';

const MAX_VALUES = 1000;

const ingestBody = z
  .object({
    device_id: uuid.optional(),
    device_identifier: text(200).optional(),
    sample_id: uuid.optional(),
    sample_ref: text(200).optional(),
    measured_at: dateTime.optional(),
    values: z
      .array(z.object({ name: text(200), value: finite, unit: text(32).optional() }).strict())
      .min(1)
      .max(MAX_VALUES),
    metadata: freeObject.optional(),
  })
  .strict()
  .refine((b) => b.device_id !== undefined || b.device_identifier !== undefined, {
    error: 'device_id or device_identifier is required',
    path: ['device_id'],
  });

const listQuery = z
  .object({
    device_id: uuid.optional(),
    sample_id: uuid.optional(),
    from: dateTime.optional(),
    to: dateTime.optional(),
    limit: limitParam(50, 500),
    offset: offsetParam,
  })
  .strict();

/** What the result routes take (the gateway documents them from these). */
export const resultSchemas = { ingest: ingestBody, list: listQuery };

/** A result as the API shows it: its device's identifier and its raw file, if any, inline. */
const resultJson = sql`json_build_object(
  'id', r.id, 'device_id', r.device_id, 'device_identifier', d.identifier, 'sample_id', r.sample_id, 'sample_ref', r.sample_ref,
  'measured_at', r.measured_at, 'values', r."values", 'metadata', r.metadata,
  'raw_file', case when f.id is null then null else json_build_object(
    'id', f.id, 'filename', f.filename, 'size', f.size, 'sha256', f.sha256, 'content_type', f.content_type) end,
  'created_by', r.created_by, 'created_at', r.created_at)`;

/** results r with their device d and raw file f, visible to the caller. */
const fromResults = (org: string, caller: CallerContext, extra: (SQL | undefined)[] = []) => sql`telemetry.results r
  left join telemetry.devices d on d.org_id = r.org_id and d.id = r.device_id
  left join telemetry.raw_files f on f.org_id = r.org_id and f.id = r.raw_file_id
  where ${where([sql`r.org_id = ${org}`, deviceScope(caller), ...extra])}`;

export interface Device {
  id: string;
  connector_id: string | null;
}

/**
 * A device of the organisation the caller may act for: 404 device_not_found, 403
 * when bound elsewhere. Inside a write's transaction it is held (FOR KEY SHARE,
 * `hold`) until the commit: a delete at the same moment then waits for the write,
 * or the write for the delete (and answers 404), instead of the result's foreign
 * key failing after the check (a 500).
 */
export async function deviceById(exec: Executor, org: string, caller: CallerContext, id: string, hold = false): Promise<Device> {
  const [d] = await rows<Device>(
    exec,
    sql`select id, connector_id from telemetry.devices where org_id = ${org} and id = ${id} ${hold ? sql`for key share` : sql``}`,
  );
  if (!d) throw DomainError.notFound('device not found', 'device_not_found');
  assertMayActFor(caller, d);
  return d;
}

/**
 * The device a result names. An unknown identifier registers the device when the
 * token has devices:register (or admin / *); otherwise 403 insufficient_scope.
 * Two results naming the same new identifier at the same moment both find no
 * device: the one whose insert loses takes the device the other registered (held
 * FOR KEY SHARE like any found device) instead of failing on the identifier's
 * unique key; only the call that registered the device audits it.
 */
async function resolveDevice(tx: Tx, emit: Emitter, org: string, caller: CallerContext, b: { device_id?: string; device_identifier?: string }) {
  if (b.device_id) return deviceById(tx, org, caller, b.device_id, true);
  const identifier = b.device_identifier!;
  const existing = async () => {
    const [d] = await rows<Device>(tx, sql`select id, connector_id from telemetry.devices where org_id = ${org} and identifier = ${identifier} for key share`);
    if (d) assertMayActFor(caller, d);
    return d;
  };
  const found = await existing();
  if (found) return found;
  if (!grantsScope(caller.scopes, 'devices:register')) {
    throw DomainError.forbidden('unknown device; registering it automatically needs the devices:register scope', 'insufficient_scope', {
      required_scope: 'devices:register',
    });
  }
  const connector_id = connectorForNewDevice(caller, null);
  const device = { name: identifier, identifier, connector_id };
  const created = await insertDeviceIfNew(tx, emit, org, caller, device);
  if (created) return { id: created.id, connector_id };
  // registered by a concurrent call (committed: the insert waited for it)
  const theirs = await existing();
  if (theirs) return theirs;
  // ... and deleted again since: register it after all
  const made = await insertDevice(tx, emit, org, caller, device);
  return { id: made.id, connector_id };
}

/** Inserts a result (and audits it); returns it as the answer's resource. */
export async function insertResult(
  tx: Tx,
  emit: Emitter,
  org: string,
  caller: CallerContext,
  r: {
    device_id: string;
    sample_id?: string;
    sample_ref?: string;
    measured_at?: string;
    values: unknown[];
    metadata?: Record<string, unknown>;
    raw_file_id?: string;
  },
): Promise<telemetry.ItemResponse['item']> {
  const id = newId();
  await tx.execute(sql`insert into telemetry.results (id, org_id, device_id, sample_id, sample_ref, measured_at, "values", metadata, raw_file_id, created_by)
      values (${id}, ${org}, ${r.device_id}, ${r.sample_id ?? null}, ${r.sample_ref ?? null}, coalesce(${r.measured_at ?? null}::timestamptz, now()),
              ${JSON.stringify(r.values)}::jsonb, ${JSON.stringify(r.metadata ?? {})}::jsonb, ${r.raw_file_id ?? null}, ${caller.user_id})`);
  const [row] = await rows<{ json: string }>(tx, sql`select ${resultJson}::text as json from ${fromResults(org, caller, [sql`r.id = ${id}`])}`);
  const after = parsed(row!.json);
  emit.audit(org, { action: 'create', resource: 'result', record_id: id, after });
  return { $case: 'result', value: resultFromRow(after) };
}

export function resultHandlers(deps: ServiceDeps) {
  const getOne = async (org: string, caller: CallerContext, id: string, what: SQL) => {
    const [row] = await deps.db.rows<{ json: string }>(sql`select ${what}::text as json from ${fromResults(org, caller, [sql`r.id = ${id}`])}`);
    if (!row) throw DomainError.notFound('result not found');
    return parsed(row.json);
  };

  return {
    ingestResult: async (req: telemetry.BodyRequest, caller: CallerContext): Promise<telemetry.ItemResponse> => {
      const org = orgOf(caller);
      assertMay(caller, 'write');
      const b = parseBody(ingestBody, req.body);
      const result = await deps.outbox.write(
        caller,
        async (tx, emit) => {
          const device = await resolveDevice(tx, emit, org, caller, b);
          return insertResult(tx, emit, org, caller, { ...b, device_id: device.id });
        },
        createdAnswer,
      );
      return createdAnswer(result);
    },

    listResults: async (req: telemetry.QueryRequest, caller: CallerContext): Promise<telemetry.ListResponse> => {
      const org = orgOf(caller);
      const q = parseQuery(listQuery, req.query);
      if (q.from && q.to && Date.parse(q.from) > Date.parse(q.to)) throw validationFailed([{ path: 'to', message: 'to must not be before from' }]);
      const from = fromResults(org, caller, [
        q.device_id ? sql`r.device_id = ${q.device_id}` : undefined,
        q.sample_id ? sql`r.sample_id = ${q.sample_id}` : undefined,
        q.from ? sql`r.measured_at >= ${q.from}::timestamptz` : undefined,
        q.to ? sql`r.measured_at < ${q.to}::timestamptz` : undefined,
      ]);
      const [r] = await deps.db.rows<{ json: string; total: string }>(
        sql`select coalesce((select json_agg(x.j order by x.measured_at desc, x.id desc) from (
                      select ${resultJson} as j, r.measured_at, r.id from ${from}
                      order by r.measured_at desc, r.id desc limit ${q.limit} offset ${q.offset}) x), '[]')::text as json,
                   (select count(*) from ${from})::text as total`,
      );
      const results = parsedList(r!.json).map(resultFromRow);
      return { page: { $case: 'results', value: { results } }, limit: q.limit, offset: q.offset, total: Number(r!.total) };
    },

    getResult: async (req: telemetry.IdRequest, caller: CallerContext): Promise<telemetry.ItemResponse> => {
      const org = orgOf(caller);
      return { item: { $case: 'result', value: resultFromRow(await getOne(org, caller, idOf(req.id, 'result'), resultJson)) }, created: false };
    },

    /**
     * Ready to plot: one series per value name (in order of first appearance),
     * its unit (the first one given), and its points {x: the result's
     * measured_at, y: the value} in the order the values were sent.
     */
    getResultChart: async (req: telemetry.IdRequest, caller: CallerContext): Promise<telemetry.ItemResponse> => {
      const org = orgOf(caller);
      const chart = sql`json_build_object('result_id', r.id, 'device_id', r.device_id, 'measured_at', r.measured_at, 'series', coalesce((
          select json_agg(json_build_object('name', s.name, 'unit', s.unit, 'points', s.points) order by s.first)
          from (select e.v->>'name' as name, min(e.o) as first,
                       (array_agg(e.v->>'unit' order by e.o) filter (where e.v ? 'unit'))[1] as unit,
                       json_agg(json_build_object('x', r.measured_at, 'y', e.v->'value') order by e.o) as points
                from jsonb_array_elements(r."values") with ordinality as e(v, o)
                group by e.v->>'name') s), '[]'::json))`;
      return { item: { $case: 'result_chart', value: resultChartFromRow(await getOne(org, caller, idOf(req.id, 'result'), chart)) }, created: false };
    },
  };
}
