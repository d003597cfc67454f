import { sql, type SQL } from 'drizzle-orm';
import { z } from 'zod';
import { pointFromRow, type telemetry } from '@lab/contracts';
import { assertOperatorOrSystem, DomainError, newId, parseWith, rows, type CallerContext, type ServiceDeps } from '@lab/kit';
import { createdAnswer, finite, idOf, parseBody, parsed, parsedList, parseQuery, text, uuid, where } from './common.js';

const MAX_POINTS = 500;

const fields = {
  parameter: text(100),
  unit: text(32),
  external_code: text(100).nullable(),
  limit_min: finite.nullable(),
  limit_max: finite.nullable(),
  room_id: uuid.nullable(),
  equipment_id: uuid.nullable(),
  active: z.boolean(),
};

const createBody = z
  .object({
    ...fields,
    external_code: fields.external_code.optional(),
    limit_min: fields.limit_min.optional(),
    limit_max: fields.limit_max.optional(),
    room_id: fields.room_id.optional(),
    equipment_id: fields.equipment_id.optional(),
    active: fields.active.default(true),
  })
  .strict();
const updateBody = z
  .object(fields)
  .partial()
  .strict()
  .refine((b) => Object.keys(b).length > 0, 'nothing to change');

const listQuery = z.object({ active: z.enum(['true', 'false']).optional() }).strict();

/** A page of the management list (0, proto's unset, is the default). */
const ADMIN_PAGE_DEFAULT = 50;
const adminPage = z.object({ limit: z.number().int().min(0).max(200), offset: z.number().int().min(0).max(1_000_000_000) });

/** What the point routes take (the gateway documents them from these). */
export const pointSchemas = { create: createBody, update: updateBody, list: listQuery };

/** A point as the API shows it, rendered by PostgreSQL. */
const pointJson = (p: SQL) => sql`json_build_object(
  'id', ${p}.id, 'external_code', ${p}.external_code, 'parameter', ${p}.parameter, 'unit', ${p}.unit,
  'limit_min', ${p}.limit_min, 'limit_max', ${p}.limit_max, 'room_id', ${p}.room_id, 'equipment_id', ${p}.equipment_id,
  'active', ${p}.active, 'created_at', ${p}.created_at, 'updated_at', ${p}.updated_at)`;

/** Points are set up by the operator (management API), never through /v1. */
const POINTS = 'managing environmental points';

const P = sql.raw('p');

/** A list page of points as PostgreSQL aggregated them (json_agg). */
const pointPage = (json: string): telemetry.ListResponse['page'] => ({
  $case: 'points',
  value: { points: parsedList(json).map(pointFromRow) },
});

export function pointHandlers(deps: ServiceDeps) {
  return {
    createPoint: async (req: telemetry.PointWriteRequest, caller: CallerContext): Promise<telemetry.ItemResponse> => {
      assertOperatorOrSystem(caller, POINTS);
      const org = uuid.safeParse(req.org_id);
      if (!org.success) throw DomainError.notFound('organisation not found');
      const b = parseBody(createBody, req.body);
      const id = newId();
      return deps.outbox.write(caller, async (tx, emit) => {
        const [row] = await rows<{ json: string }>(
          tx,
          sql`with p as (insert into telemetry.environmental_points
                (id, org_id, external_code, parameter, unit, limit_min, limit_max, room_id, equipment_id, active)
              values (${id}, ${org.data}, ${b.external_code ?? null}, ${b.parameter}, ${b.unit}, ${b.limit_min ?? null},
                      ${b.limit_max ?? null}, ${b.room_id ?? null}, ${b.equipment_id ?? null}, ${b.active})
              returning *)
              select ${pointJson(P)}::text as json from p`,
        );
        const after = parsed(row!.json);
        emit.audit(org.data, { action: 'create', resource: 'environmental_point', record_id: id, after });
        return createdAnswer({ $case: 'point', value: pointFromRow(after) });
      });
    },

    updatePoint: async (req: telemetry.PointWriteRequest, caller: CallerContext): Promise<telemetry.ItemResponse> => {
      assertOperatorOrSystem(caller, POINTS);
      const org = uuid.safeParse(req.org_id);
      if (!org.success) throw DomainError.notFound('point not found');
      const id = idOf(req.point_id, 'point');
      const b = parseBody(updateBody, req.body);
      const sets = Object.entries(b).map(([k, v]) => sql`${sql.identifier(k)} = ${v ?? null}`);
      return deps.outbox.write(caller, async (tx, emit) => {
        const found = await rows<{ before: string; json: string }>(
          tx,
          sql`with old as (select ${pointJson(P)}::text as before from telemetry.environmental_points p
                           where p.org_id = ${org.data} and p.id = ${id}),
                   p as (update telemetry.environmental_points set ${sql.join(sets, sql`, `)}, updated_at = now()
                         where org_id = ${org.data} and id = ${id} returning *)
              select old.before, ${pointJson(P)}::text as json from p, old`,
        );
        const row = found[0];
        if (!row) throw DomainError.notFound('point not found');
        const after = parsed(row.json);
        emit.audit(org.data, { action: 'update', resource: 'environmental_point', record_id: id, before: parsed(row.before), after });
        return { item: { $case: 'point', value: pointFromRow(after) }, created: false };
      });
    },

    /** The management list: every point of the organisation, active or not, a page at a time. */
    adminListPoints: async (req: telemetry.PointPageRequest, caller: CallerContext): Promise<telemetry.ListResponse> => {
      assertOperatorOrSystem(caller, POINTS);
      const org = uuid.safeParse(req.org_id);
      if (!org.success) throw DomainError.notFound('organisation not found');
      const p = parseWith(adminPage, { limit: req.limit, offset: req.offset });
      const limit = p.limit || ADMIN_PAGE_DEFAULT;
      const [r] = await deps.db.rows<{ json: string; total: string }>(
        sql`select coalesce(json_agg(${pointJson(P)} order by p.created_at, p.id), '[]')::text as json,
                   (select count(*) from telemetry.environmental_points c where c.org_id = ${org.data})::text as total
            from (select * from telemetry.environmental_points where org_id = ${org.data}
                  order by created_at, id limit ${limit} offset ${p.offset}) p`,
      );
      return { page: pointPage(r!.json), limit, offset: p.offset, total: Number(r!.total) };
    },

    /**
     * Deletes a point that has no readings. One with readings is deactivated
     * instead: its readings keep their point (the spec's listed fields, the
     * breach history), and ingest rejects new ones for it (point_inactive).
     * The point's row is locked first (an ingest holds a key-share lock on the
     * points it stores readings for until it commits), and the readings are
     * counted after the lock, in a statement of their own: counted in the
     * locking statement's snapshot, a reading committed while it waited would
     * be missed and deleted with the point (on delete cascade).
     */
    deletePoint: async (req: telemetry.PointWriteRequest, caller: CallerContext): Promise<telemetry.DeletePointResponse> => {
      assertOperatorOrSystem(caller, POINTS);
      const org = uuid.safeParse(req.org_id);
      if (!org.success) throw DomainError.notFound('point not found');
      const id = idOf(req.point_id, 'point');
      return deps.outbox.write(caller, async (tx, emit) => {
        const [before] = await rows<{ json: string }>(
          tx,
          sql`select ${pointJson(P)}::text as json from telemetry.environmental_points p where p.org_id = ${org.data} and p.id = ${id} for update`,
        );
        if (!before) throw DomainError.notFound('point not found');
        const [deleted] = await rows<{ id: string }>(
          tx,
          sql`delete from telemetry.environmental_points p where p.org_id = ${org.data} and p.id = ${id}
                and not exists (select 1 from telemetry.environmental_readings r where r.org_id = p.org_id and r.point_id = p.id)
              returning p.id`,
        );
        if (deleted) {
          emit.audit(org.data, { action: 'delete', resource: 'environmental_point', record_id: id, before: parsed(before.json) });
          return { deleted: true };
        }
        const [after] = await rows<{ json: string }>(
          tx,
          sql`with p as (update telemetry.environmental_points set active = false, updated_at = now()
                         where org_id = ${org.data} and id = ${id} returning *)
              select ${pointJson(P)}::text as json from p`,
        );
        const point = parsed(after!.json);
        emit.audit(org.data, { action: 'update', resource: 'environmental_point', record_id: id, before: parsed(before.json), after: point });
        return { deleted: false, point: pointFromRow(point) };
      });
    },

    listPoints: async (req: telemetry.QueryRequest, caller: CallerContext): Promise<telemetry.ListResponse> => {
      const org = caller.org_id;
      if (!org) throw DomainError.forbidden('the call names no organisation', 'org_required');
      const q = parseQuery(listQuery, req.query);
      const [r] = await deps.db.rows<{ json: string; total: string }>(
        sql`select coalesce(json_agg(${pointJson(P)} order by p.parameter, p.id), '[]')::text as json,
                   (select count(*) from telemetry.environmental_points c
                     where ${where([sql`c.org_id = ${org}`, q.active ? sql`c.active = ${q.active === 'true'}` : undefined])})::text as total
            from (select * from telemetry.environmental_points
                  where ${where([sql`org_id = ${org}`, q.active ? sql`active = ${q.active === 'true'}` : undefined])}
                  order by parameter, id limit ${MAX_POINTS}) p`,
      );
      return { page: pointPage(r!.json), limit: MAX_POINTS, offset: 0, total: Number(r!.total) };
    },
  };
}
