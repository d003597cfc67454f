import type { Emitter } from '@lab/kit';
import type { RecordJson } from '@lab/records';

/**
 * The equipment's domain events, built from records as PostgreSQL rendered
 * them. org_id is the record's organisation, so the sweep (which has no
 * caller) emits exactly what a request would.
 */
const pick = (row: RecordJson, keys: string[]) => Object.fromEntries(keys.map((k) => [k, row[k] ?? null]));

export const usageEvents = {
  started: (emit: Emitter, orgId: string, s: RecordJson) =>
    emit.event('equipment.usage.started', orgId, {
      session_id: s.id,
      ...pick(s, ['equipment_id', 'user_id', 'started_at', 'purpose', 'project_id', 'entry_id']),
      settings: s.settings ?? {},
    }),
  completed: (emit: Emitter, orgId: string, s: RecordJson) =>
    emit.event('equipment.usage.completed', orgId, {
      session_id: s.id,
      ...pick(s, ['equipment_id', 'user_id', 'started_at', 'ended_at', 'duration_minutes', 'purpose', 'project_id', 'entry_id']),
      auto_closed: s.auto_closed === true,
    }),
};

export const maintenanceEvents = {
  completed: (emit: Emitter, orgId: string, log: RecordJson) =>
    emit.event('equipment.maintenance.completed', orgId, {
      log_id: log.id,
      ...pick(log, ['equipment_id', 'maintenance_type', 'completed_date', 'performed_by', 'result', 'severity', 'next_maintenance_date']),
    }),
};
