import { sql, type SQL } from 'drizzle-orm';
import { z } from 'zod';
import { connectorFromRow, type telemetry } from '@lab/contracts';
import { DomainError, newId, rows, validationFailed, type CallerContext, type ServiceDeps, type Tx } from '@lab/kit';
import { assertMay } from '@lab/permissions';
import { isBound } from './access.js';
import { idOf, limitParam, offsetParam, orgOf, parseBody, parsed, parsedList, parseQuery, text, uuid, where } from './common.js';

const MAX_SYNCED_DEVICES = 1000;

const heartbeatBody = z
  .object({
    connector_id: uuid.optional(),
    name: text(200).optional(),
    version: text(100).nullish(),
    host: text(255).nullish(),
    devices: z
      .array(z.object({ identifier: text(200), name: text(200), kind: text(100).nullish() }).strict())
      .max(MAX_SYNCED_DEVICES)
      .optional(),
  })
  .strict();

const listQuery = z.object({ limit: limitParam(50, 500), offset: offsetParam }).strict();

/** What the connector routes take (the gateway documents them from these). */
export const connectorSchemas = { heartbeat: heartbeatBody, list: listQuery };

/**
 * status is derived from last_seen_at when read: online within 2 minutes of the
 * last heartbeat, stale within 15, offline after that (or never seen).
 */
const connectorJson = (c: SQL) => sql`json_build_object(
  'id', ${c}.id, 'name', ${c}.name, 'version', ${c}.version, 'host', ${c}.host, 'last_seen_at', ${c}.last_seen_at,
  'status', case when ${c}.last_seen_at > now() - interval '2 minutes' then 'online'
                 when ${c}.last_seen_at > now() - interval '15 minutes' then 'stale' else 'offline' end,
  'device_count', (select count(*) from telemetry.devices x where x.org_id = ${c}.org_id and x.connector_id = ${c}.id),
  'created_by', ${c}.created_by, 'created_at', ${c}.created_at, 'updated_at', ${c}.updated_at)`;
const C = sql.raw('c');

/** Connectors a caller sees: all of the org, or only its own when the key is bound. */
const connectorScope = (caller: CallerContext): SQL | undefined =>
  isBound(caller) ? (caller.connector_id ? sql`c.id = ${caller.connector_id}::uuid` : sql`false`) : undefined;

type Body = z.infer<typeof heartbeatBody>;

/** Finds or makes the connector of a heartbeat; the key's bound connector wins over the body. */
async function upsertConnector(tx: Tx, org: string, caller: CallerContext, b: Body): Promise<{ id: string; created: boolean }> {
  if (isBound(caller) && !caller.connector_id) {
    throw DomainError.forbidden('an API key bound to devices cannot act as a connector', 'connector_not_allowed');
  }
  if (caller.connector_id && b.connector_id && b.connector_id !== caller.connector_id) {
    throw DomainError.forbidden('this API key acts for its own connector only', 'connector_not_allowed');
  }
  const id = caller.connector_id ?? b.connector_id;
  /** The heartbeat on an existing connector: true when the organisation has it. */
  const touch = async (id: string) => {
    const [row] = await rows<{ id: string }>(
      tx,
      sql`update telemetry.connectors set name = coalesce(${b.name ?? null}, name), version = coalesce(${b.version ?? null}, version),
            host = coalesce(${b.host ?? null}, host), last_seen_at = now(), updated_at = now()
          where org_id = ${org} and id = ${id} returning id`,
    );
    return !!row;
  };
  if (id) {
    if (await touch(id)) return { id, created: false };
    // a bound key's connector comes into being with its first heartbeat
    if (!caller.connector_id) throw DomainError.notFound('connector not found');
  }
  if (!b.name) throw validationFailed([{ path: 'name', message: 'name is required for a new connector (or give connector_id)' }]);
  if (id) {
    const insert = sql`insert into telemetry.connectors (id, org_id, name, version, host, last_seen_at, created_by)
        values (${id}, ${org}, ${b.name}, ${b.version ?? null}, ${b.host ?? null}, now(), ${caller.user_id})`;
    // The bound connector's own id. The same first heartbeat sent twice at once:
    // both find nothing to update; the insert that loses waits for the other's
    // commit, inserts nothing, and this heartbeat updates the connector it made.
    // (No conflict target: every unique key is checked without an error, so two
    // inserts at the very same moment cannot fail on one that is not named.)
    const [made] = await rows<{ id: string }>(tx, sql`${insert} on conflict do nothing returning id`);
    if (made) return { id, created: true };
    if (await touch(id)) return { id, created: false };
    // a key bound (before that was refused at creation) to another organisation's connector
    const [foreign] = await rows<{ id: string }>(tx, sql`select id from telemetry.connectors where id = ${id} and org_id <> ${org}`);
    if (foreign) throw DomainError.forbidden('the connector this API key is bound to belongs to another organisation', 'connector_not_allowed');
    // not this connector: a name taken by another connector is a conflict (409
    // connector_name_taken), not a takeover; the plain insert answers it (or, if
    // that connector has gone since, makes this one)
    await tx.execute(insert);
    return { id, created: true };
  }
  const [row] = await rows<{ id: string; created: boolean }>(
    tx,
    sql`insert into telemetry.connectors (id, org_id, name, version, host, last_seen_at, created_by)
        values (${newId()}, ${org}, ${b.name}, ${b.version ?? null}, ${b.host ?? null}, now(), ${caller.user_id})
        on conflict (org_id, name) do update set version = coalesce(excluded.version, connectors.version),
          host = coalesce(excluded.host, connectors.host), last_seen_at = now(), updated_at = now()
        returning id, (xmax = 0) as created`,
  );
  return row!;
}

/**
 * Upserts the reported devices by identifier, linking them to the connector; one
 * statement. The rows go in identifier order, so two heartbeats whose lists
 * overlap lock the devices they share in the same order (neither waits for a
 * device the other holds while holding one it waits for: no deadlock).
 */
async function syncDevices(tx: Tx, org: string, caller: CallerContext, connectorId: string, devices: NonNullable<Body['devices']>): Promise<number> {
  if (!devices.length) return 0;
  const identifiers = devices.map((d) => d.identifier);
  if (new Set(identifiers).size !== identifiers.length) {
    throw validationFailed([{ path: 'devices', message: 'each identifier may appear once' }]);
  }
  const list = JSON.stringify(devices.map((d) => ({ id: newId(), identifier: d.identifier, name: d.name, kind: d.kind ?? null })));
  // A bound key cannot take over devices that belong to another connector. The
  // check is the upsert's own: a device another connector inserts meanwhile is
  // seen (waited for) by the upsert, where a separate check would have missed it.
  const bound = isBound(caller);
  const synced = await rows<{ identifier: string }>(
    tx,
    sql`insert into telemetry.devices (id, org_id, name, identifier, kind, connector_id, created_by)
          select u.id, ${org}::uuid, u.name, u.identifier, u.kind, ${connectorId}::uuid, ${caller.user_id}::uuid
          from jsonb_to_recordset(${list}::jsonb) as u(id uuid, identifier text, name text, kind text)
          order by u.identifier
          on conflict (org_id, identifier) do update set name = excluded.name, kind = coalesce(excluded.kind, devices.kind),
            connector_id = excluded.connector_id, updated_at = now()
          ${bound ? sql`where devices.connector_id is null or devices.connector_id = ${connectorId}::uuid` : sql``}
          returning identifier`,
  );
  if (synced.length < devices.length) {
    // the rows skipped are the devices of other connectors (the transaction rolls back)
    const done = new Set(synced.map((s) => s.identifier));
    const taken = identifiers.filter((i) => !done.has(i)).sort();
    throw DomainError.forbidden('some devices belong to another connector', 'device_not_allowed', { identifiers: taken });
  }
  return synced.length;
}

export function connectorHandlers(deps: ServiceDeps) {
  const one = async (org: string, id: string, caller: CallerContext, exec?: Tx) => {
    const [row] = await deps.db.rows<{ json: string }>(
      sql`select ${connectorJson(C)}::text as json from telemetry.connectors c
          where ${where([sql`c.org_id = ${org}`, sql`c.id = ${id}`, connectorScope(caller)])}`,
      exec,
    );
    return row && parsed(row.json);
  };

  return {
    connectorHeartbeat: async (req: telemetry.BodyRequest, caller: CallerContext): Promise<telemetry.ItemResponse> => {
      const org = orgOf(caller);
      assertMay(caller, 'write');
      const b = parseBody(heartbeatBody, req.body);
      return deps.outbox.write(
        caller,
        async (tx, emit) => {
          const c = await upsertConnector(tx, org, caller, b);
          const synced = await syncDevices(tx, org, caller, c.id, b.devices ?? []);
          const row = (await one(org, c.id, { ...caller, connector_id: null, device_ids: [] }, tx))!;
          emit.audit(org, {
            action: c.created ? 'create' : 'heartbeat',
            resource: 'connector',
            record_id: c.id,
            after: { ...row, devices_synced: synced },
          });
          const value = { connector: connectorFromRow(row), devices_synced: synced };
          return { item: { $case: 'connector_heartbeat', value }, created: c.created } satisfies telemetry.ItemResponse;
        },
        (res) => res,
      );
    },

    listConnectors: async (req: telemetry.QueryRequest, caller: CallerContext): Promise<telemetry.ListResponse> => {
      const org = orgOf(caller);
      const q = parseQuery(listQuery, req.query);
      const cond = where([sql`c.org_id = ${org}`, connectorScope(caller)]);
      const [r] = await deps.db.rows<{ json: string; total: string }>(
        sql`select coalesce(json_agg(${connectorJson(C)} order by c.name, c.id), '[]')::text as json,
                   (select count(*) from telemetry.connectors c where ${cond})::text as total
            from (select * from telemetry.connectors c where ${cond} order by c.name, c.id limit ${q.limit} offset ${q.offset}) c`,
      );
      const connectors = parsedList(r!.json).map(connectorFromRow);
      return { page: { $case: 'connectors', value: { connectors } }, limit: q.limit, offset: q.offset, total: Number(r!.total) };
    },

    getConnector: async (req: telemetry.IdRequest, caller: CallerContext): Promise<telemetry.ItemResponse> => {
      const org = orgOf(caller);
      const row = await one(org, idOf(req.id, 'connector'), caller);
      if (!row) throw DomainError.notFound('connector not found');
      return { item: { $case: 'connector', value: connectorFromRow(row) }, created: false };
    },

    deleteConnector: async (req: telemetry.IdRequest, caller: CallerContext): Promise<telemetry.Empty> => {
      const org = orgOf(caller);
      const id = idOf(req.id, 'connector');
      assertMay(caller, 'delete', 'a connector');
      await deps.outbox.write(
        caller,
        async (tx, emit) => {
          const [row] = await rows<{ id: string }>(
            tx,
            sql`delete from telemetry.connectors c where ${where([sql`c.org_id = ${org}`, sql`c.id = ${id}`, connectorScope(caller)])} returning c.id`,
          );
          if (!row) throw DomainError.notFound('connector not found');
          emit.audit(org, { action: 'delete', resource: 'connector', record_id: id });
        },
        () => ({}),
      );
      return {};
    },
  };
}
