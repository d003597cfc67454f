import { sql, type SQL } from 'drizzle-orm';
import type { equipmentCalendar } from '@lab/contracts';
import { DomainError, isGuid, type CallerContext, type ServiceDeps } from '@lab/kit';
import { equipment } from './equipment.js';

type Entry = equipmentCalendar.CalendarEntry;

/**
 * What a calendar of equipment shows (decision 060), as the caller may read it:
 * only entries of equipment the caller can see (the equipment's department
 * rule, `equipment.canRead`), of the caller's organisation.
 *
 * - a usage session: timed, started_at to ended_at (no end while it is open);
 * - a maintenance log: all day on its date (completed, else scheduled);
 * - a calibration: all day on its `calibration_date` (or `calibrated_at`,
 *   `date`), else the day it was recorded;
 * - the next due dates, all day, one of each per item: the equipment's
 *   next_maintenance_date (which completing a log moves), and the due date of
 *   its latest calibration (`next_calibration_date`, `next_due_date` or
 *   `due_date`). An older calibration's due date is superseded, not shown.
 *
 * Records of the last WINDOW_DAYS and later are shown, at most MAX_PER_KIND of
 * each kind (the latest): a calendar client fetches the whole feed every time.
 */
const WINDOW_DAYS = 365;
const MAX_PER_KIND = 2000;

const utc = (column: string) => sql.raw(`to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`);
/** Timed entries to the second: calendars show no milliseconds. */
const utcSeconds = (column: string) => sql.raw(`to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')`);

/** The conditions every query shares: the caller's organisation, the equipment it may see, the one item asked for. */
function visibleEquipment(caller: CallerContext, equipmentId: string | undefined): SQL {
  const where = [sql`t.org_id = ${caller.org_id}::uuid`];
  const visible = equipment.canRead?.(caller);
  if (visible) where.push(sql`(${visible})`);
  if (equipmentId) where.push(sql`t.id = ${equipmentId}::uuid`);
  return sql.join(where, sql` and `);
}

const lines = (...parts: (string | null | undefined)[]) => parts.filter((p): p is string => !!p).join('\n') || undefined;
/** An optional field of an entry: absent rather than empty. */
const optional = (key: 'description' | 'ends_at', v: string | undefined): Partial<Record<typeof key, string>> => (v === undefined ? {} : { [key]: v });

/** A day from a free-form value: YYYY-MM-DD as given, or an ISO timestamp's day in UTC. */
function dayOf(v: unknown): string | undefined {
  if (typeof v !== 'string') return undefined;
  if (/^\d{4}-\d{2}-\d{2}$/.test(v)) return v;
  if (!/^\d{4}-\d{2}-\d{2}T/.test(v)) return undefined;
  const t = Date.parse(v);
  return Number.isNaN(t) ? undefined : new Date(t).toISOString().slice(0, 10);
}
const firstDay = (data: Record<string, unknown>, keys: string[]) => keys.map((k) => dayOf(data[k])).find((d) => d !== undefined);
const CALIBRATION_DAY = ['calibration_date', 'calibrated_at', 'date'];
const CALIBRATION_DUE = ['next_calibration_date', 'next_due_date', 'due_date'];

interface UsageRow {
  id: string;
  equipment_id: string;
  equipment_name: string;
  purpose: string | null;
  auto_closed: boolean;
  starts_at: string;
  ends_at: string | null;
  updated_at: string;
}

async function usageEntries(deps: ServiceDeps, where: SQL): Promise<Entry[]> {
  const rows = await deps.db.rows<UsageRow>(sql`
    select u.id::text, u.equipment_id::text, t.name as equipment_name, u.purpose, u.auto_closed,
           ${utcSeconds('u.started_at')} as starts_at, ${utcSeconds('u.ended_at')} as ends_at, ${utc('u.updated_at')} as updated_at
    from equipment.usage_sessions u join equipment.equipment t on t.org_id = u.org_id and t.id = u.equipment_id
    where ${where} and (u.ended_at is null or u.ended_at >= now() - ${WINDOW_DAYS} * interval '1 day')
    order by u.started_at desc limit ${MAX_PER_KIND}`);
  return rows.map((r) => ({
    kind: 'usage',
    record_id: r.id,
    equipment_id: r.equipment_id,
    summary: `${r.equipment_name}: in use${r.ends_at === null ? ' (open)' : ''}`,
    ...optional('description', lines(r.purpose, r.auto_closed ? 'closed automatically' : null)),
    starts_at: r.starts_at,
    ...optional('ends_at', r.ends_at ?? undefined),
    updated_at: r.updated_at,
  }));
}

interface MaintenanceRow {
  id: string;
  equipment_id: string;
  equipment_name: string;
  maintenance_type: string;
  severity: string;
  done: boolean;
  log_date: string;
  description: string | null;
  result: string | null;
  updated_at: string;
}

async function maintenanceEntries(deps: ServiceDeps, where: SQL): Promise<Entry[]> {
  const rows = await deps.db.rows<MaintenanceRow>(sql`
    select m.id::text, m.equipment_id::text, t.name as equipment_name, m.maintenance_type, m.severity,
           m.completed_date is not null as done, m.log_date::text as log_date, m.description, m.result, ${utc('m.updated_at')} as updated_at
    from equipment.maintenance_logs m join equipment.equipment t on t.org_id = m.org_id and t.id = m.equipment_id
    where ${where} and m.log_date >= current_date - ${WINDOW_DAYS}::integer
    order by m.log_date desc limit ${MAX_PER_KIND}`);
  return rows.map((r) => ({
    kind: 'maintenance',
    record_id: r.id,
    equipment_id: r.equipment_id,
    summary: `${r.equipment_name}: ${r.maintenance_type} maintenance${r.done ? '' : ' (scheduled)'}`,
    ...optional('description', lines(r.description, r.result ? `Result: ${r.result}` : null, r.severity !== 'normal' ? `Severity: ${r.severity}` : null)),
    date: r.log_date,
    updated_at: r.updated_at,
  }));
}

interface CalibrationRow {
  id: string;
  equipment_id: string;
  equipment_name: string;
  data: Record<string, unknown>;
  created_day: string;
  updated_at: string;
}

async function calibrationEntries(deps: ServiceDeps, where: SQL): Promise<Entry[]> {
  const columns = sql`c.id::text, c.equipment_id::text, t.name as equipment_name, c.data,
    (c.created_at at time zone 'UTC')::date::text as created_day, ${utc('c.updated_at')} as updated_at`;
  const from = sql`equipment.calibrations c join equipment.equipment t on t.org_id = c.org_id and t.id = c.equipment_id`;
  const [recent, latest] = await Promise.all([
    deps.db.rows<CalibrationRow>(sql`select ${columns} from ${from}
      where ${where} and c.created_at >= now() - ${WINDOW_DAYS} * interval '1 day' order by c.created_at desc limit ${MAX_PER_KIND}`),
    // the latest calibration of each item, however old: its due date is the one in force
    deps.db.rows<CalibrationRow>(sql`select distinct on (c.equipment_id) ${columns} from ${from}
      where ${where} order by c.equipment_id, c.created_at desc, c.id desc`),
  ]);
  const done: Entry[] = recent.map((r) => ({
    kind: 'calibration',
    record_id: r.id,
    equipment_id: r.equipment_id,
    summary: `${r.equipment_name}: calibration`,
    date: firstDay(r.data, CALIBRATION_DAY) ?? r.created_day,
    updated_at: r.updated_at,
  }));
  const due: Entry[] = latest.flatMap((r) => {
    const date = firstDay(r.data, CALIBRATION_DUE);
    if (!date) return [];
    return [
      {
        kind: 'calibration-due',
        record_id: r.id,
        equipment_id: r.equipment_id,
        summary: `${r.equipment_name}: calibration due`,
        date,
        updated_at: r.updated_at,
      },
    ];
  });
  return [...done, ...due];
}

async function maintenanceDueEntries(deps: ServiceDeps, where: SQL): Promise<Entry[]> {
  const rows = await deps.db.rows<{ id: string; name: string; due: string; updated_at: string }>(sql`
    select t.id::text, t.name, t.next_maintenance_date::text as due, ${utc('t.updated_at')} as updated_at
    from equipment.equipment t where ${where} and t.next_maintenance_date is not null
    order by t.next_maintenance_date desc limit ${MAX_PER_KIND}`);
  return rows.map((r) => ({
    kind: 'maintenance-due',
    record_id: r.id,
    equipment_id: r.id,
    summary: `${r.name}: maintenance due`,
    date: r.due,
    updated_at: r.updated_at,
  }));
}

/** Every entry of the caller's calendar of equipment, or of one item (404 when the caller cannot see it). */
export async function listCalendarEntries(deps: ServiceDeps, caller: CallerContext, equipmentId?: string): Promise<Entry[]> {
  if (!caller.org_id) throw DomainError.forbidden('no organisation selected', 'org_required');
  if (equipmentId !== undefined && !isGuid(equipmentId)) throw DomainError.notFound('equipment not found');
  const id = equipmentId?.toLowerCase();
  const where = visibleEquipment(caller, id);
  if (id) {
    const [seen] = await deps.db.rows<{ id: string }>(sql`select t.id from equipment.equipment t where ${where}`);
    if (!seen) throw DomainError.notFound('equipment not found');
  }
  const kinds = await Promise.all([
    usageEntries(deps, where),
    maintenanceEntries(deps, where),
    calibrationEntries(deps, where),
    maintenanceDueEntries(deps, where),
  ]);
  return kinds.flat();
}
