import { sql, type SQL } from 'drizzle-orm';
import { z } from 'zod';
import { deviceFromRow, type telemetry } from '@lab/contracts';
import { DomainError, newId, rows, validationFailed, type CallerContext, type Emitter, type ServiceDeps, type Tx } from '@lab/kit';
import { assertMay } from '@lab/permissions';
import { deviceScope, isBound } from './access.js';
import { createdAnswer, freeObject, idOf, limitParam, offsetParam, orgOf, parseBody, parsed, parsedList, parseQuery, text, uuid, where } from './common.js';

const optText = (max: number) => text(max).nullish();

const registerBody = z
  .object({
    name: text(200),
    identifier: text(200),
    kind: optText(100),
    // `type` is accepted as another name of kind
    type: optText(100),
    manufacturer: optText(200),
    model: optText(200),
    serial_number: optText(200),
    connector_id: uuid.nullish(),
    metadata: freeObject.optional(),
  })
  .strict();

const listQuery = z.object({ limit: limitParam(50, 500), offset: offsetParam, connector_id: uuid.optional(), kind: text(100).optional() }).strict();

/** What the device routes take (the gateway documents them from these). */
export const deviceSchemas = { register: registerBody, list: listQuery };

const deviceJson = (d: SQL) => sql`json_build_object(
  'id', ${d}.id, 'name', ${d}.name, 'identifier', ${d}.identifier, 'kind', ${d}.kind, 'manufacturer', ${d}.manufacturer,
  'model', ${d}.model, 'serial_number', ${d}.serial_number, 'connector_id', ${d}.connector_id, 'metadata', ${d}.metadata,
  'created_by', ${d}.created_by, 'created_at', ${d}.created_at, 'updated_at', ${d}.updated_at)`;
const D = sql.raw('d');

export interface NewDevice {
  name: string;
  identifier: string;
  kind?: string | null;
  manufacturer?: string | null;
  model?: string | null;
  serial_number?: string | null;
  connector_id?: string | null;
  metadata?: Record<string, unknown>;
}

/**
 * The connector a new device of this caller belongs to: a connector-bound key
 * registers for its own connector only; a key bound to devices alone cannot
 * register new ones (they could not be among its devices).
 */
export function connectorForNewDevice(caller: CallerContext, given: string | null | undefined): string | null {
  if (!isBound(caller)) return given ?? null;
  if (!caller.connector_id) throw DomainError.forbidden('an API key bound to devices cannot register new devices', 'device_not_allowed');
  if (given && given !== caller.connector_id) throw DomainError.forbidden('this API key acts for its own connector only', 'connector_not_allowed');
  return caller.connector_id;
}

type StoredDevice = { id: string; device: telemetry.Device };

/**
 * Inserts one device and audits it; returns it and its id. An identifier the
 * organisation already has is a conflict (409 device_identifier_taken).
 */
export async function insertDevice(tx: Tx, emit: Emitter, org: string, caller: CallerContext, d: NewDevice): Promise<StoredDevice> {
  return (await writeDevice(tx, emit, org, caller, d, false))!;
}

/**
 * As insertDevice, but an identifier the organisation already has is no error:
 * nothing is inserted nor audited, and the answer is undefined (the caller then
 * takes the device that has it, committed by now: an insert of the same
 * identifier still in progress is waited for).
 */
export function insertDeviceIfNew(tx: Tx, emit: Emitter, org: string, caller: CallerContext, d: NewDevice): Promise<StoredDevice | undefined> {
  return writeDevice(tx, emit, org, caller, d, true);
}

async function writeDevice(tx: Tx, emit: Emitter, org: string, caller: CallerContext, d: NewDevice, ifNew: boolean): Promise<StoredDevice | undefined> {
  if (d.connector_id) {
    // held to the commit (FOR KEY SHARE): a connector deleted at the same moment cannot fail the foreign key after this check
    const found = await rows(tx, sql`select 1 from telemetry.connectors where org_id = ${org} and id = ${d.connector_id} for key share`);
    if (!found.length) throw validationFailed([{ path: 'connector_id', message: 'no connector with this id in the organisation' }]);
  }
  const id = newId();
  const [row] = await rows<{ json: string }>(
    tx,
    sql`with d as (insert into telemetry.devices
          (id, org_id, name, identifier, kind, manufacturer, model, serial_number, connector_id, metadata, created_by)
        values (${id}, ${org}, ${d.name}, ${d.identifier}, ${d.kind ?? null}, ${d.manufacturer ?? null}, ${d.model ?? null},
                ${d.serial_number ?? null}, ${d.connector_id ?? null}, ${JSON.stringify(d.metadata ?? {})}::jsonb, ${caller.user_id})
        ${ifNew ? sql`on conflict (org_id, identifier) do nothing` : sql``}
        returning *)
        select ${deviceJson(D)}::text as json from d`,
  );
  if (!row) return undefined;
  const after = parsed(row.json);
  emit.audit(org, { action: 'create', resource: 'device', record_id: id, after });
  return { id, device: deviceFromRow(after) };
}

export function deviceHandlers(deps: ServiceDeps) {
  return {
    registerDevice: async (req: telemetry.BodyRequest, caller: CallerContext): Promise<telemetry.ItemResponse> => {
      const org = orgOf(caller);
      assertMay(caller, 'write');
      const b = parseBody(registerBody, req.body);
      const connector_id = connectorForNewDevice(caller, b.connector_id);
      const answer = ({ device }: StoredDevice) => createdAnswer({ $case: 'device', value: device });
      return answer(
        await deps.outbox.write(caller, (tx, emit) => insertDevice(tx, emit, org, caller, { ...b, kind: b.kind ?? b.type ?? null, connector_id }), answer),
      );
    },

    listDevices: async (req: telemetry.QueryRequest, caller: CallerContext): Promise<telemetry.ListResponse> => {
      const org = orgOf(caller);
      const q = parseQuery(listQuery, req.query);
      const cond = where([
        sql`d.org_id = ${org}`,
        deviceScope(caller),
        q.connector_id ? sql`d.connector_id = ${q.connector_id}` : undefined,
        q.kind ? sql`d.kind = ${q.kind}` : undefined,
      ]);
      const [r] = await deps.db.rows<{ json: string; total: string }>(
        sql`select coalesce(json_agg(${deviceJson(D)} order by d.created_at desc, d.id desc), '[]')::text as json,
                   (select count(*) from telemetry.devices d where ${cond})::text as total
            from (select * from telemetry.devices d where ${cond}
                  order by d.created_at desc, d.id desc limit ${q.limit} offset ${q.offset}) d`,
      );
      const devices = parsedList(r!.json).map(deviceFromRow);
      return { page: { $case: 'devices', value: { devices } }, limit: q.limit, offset: q.offset, total: Number(r!.total) };
    },

    deleteDevice: async (req: telemetry.IdRequest, caller: CallerContext): Promise<telemetry.Empty> => {
      const org = orgOf(caller);
      const id = idOf(req.id, 'device');
      assertMay(caller, 'delete', 'a device');
      await deps.outbox.write(
        caller,
        async (tx, emit) => {
          const [row] = await rows<{ json: string }>(
            tx,
            sql`with d as (delete from telemetry.devices d where ${where([sql`d.org_id = ${org}`, sql`d.id = ${id}`, deviceScope(caller)])}
                         returning *)
              select ${deviceJson(D)}::text as json from d`,
          );
          if (!row) throw DomainError.notFound('device not found');
          emit.audit(org, { action: 'delete', resource: 'device', record_id: id, before: parsed(row.json) });
        },
        () => ({}),
      );
      return {};
    },
  };
}
