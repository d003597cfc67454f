import { z } from 'zod';
import { type CallerContext, type Emitter, type Tx } from '@lab/kit';
import { defineResource, findRecord, updateColumns, type RecordJson } from '@lab/records';
import { equipment, underEquipment } from './equipment.js';
import { maintenanceEvents } from './events.js';
import { date, reference, SUB_LIST_LIMITS, text } from './fields.js';
import { childAccess } from './permissions.js';

const fields = {
  maintenance_type: z.enum(['scheduled', 'unscheduled', 'repair', 'inspection']),
  severity: z.enum(['low', 'normal', 'high', 'critical']).optional(),
  scheduled_date: date.nullable().optional(),
  completed_date: date.nullable().optional(),
  next_maintenance_date: date.nullable().optional(),
  description: text.nullable().optional(),
  result: text.nullable().optional(),
  performed_by: reference.nullable().optional(),
};
const createMaintenance = z.strictObject(fields);

/**
 * Completing a log moves the equipment's maintenance dates, in the same
 * transaction as the log, with its own audit record: last_maintenance_date
 * becomes the completion date, next_maintenance_date the log's when it gives one.
 */
async function completeOnEquipment(tx: Tx, emit: Emitter, caller: CallerContext, log: RecordJson): Promise<void> {
  const id = String(log.equipment_id);
  // no key update: it does not wait for the key share a log being written under
  // this equipment holds (a second completion running at the same moment)
  const before = await findRecord(tx, equipment, caller, id, { allVisible: true, lock: 'no key update' });
  if (!before) return; // the foreign key makes this unreachable; nothing to move
  const values: Record<string, unknown> = { last_maintenance_date: log.completed_date };
  if (log.next_maintenance_date != null) values.next_maintenance_date = log.next_maintenance_date;
  await updateColumns(tx, equipment, caller, id, values);
  const after = await findRecord(tx, equipment, caller, id, { allVisible: true });
  emit.audit(caller.org_id, { action: 'update', resource: equipment.auditResource, record_id: id, before: before.row, after: after?.row ?? null });
  maintenanceEvents.completed(emit, caller.org_id!, log);
}

/**
 * Maintenance logs. A log is completed when completed_date is set for the
 * first time (on create or update); lists are bounded by from/to on the log's
 * date (completed_date, else scheduled_date).
 */
export const maintenance = defineResource({
  name: 'equipment/maintenance',
  record: 'maintenance_log',
  table: 'equipment.maintenance_logs',
  auditResource: 'equipment_maintenance',
  parent: underEquipment,
  create: createMaintenance,
  update: createMaintenance.partial(),
  filters: { maintenance_type: 'string', severity: 'string', performed_by: 'uuid', completed_date: 'date', scheduled_date: 'date' },
  references: { performed_by: { noun: 'member', peer: 'member' } },
  orderBy: ['updated_at', 'log_date', 'scheduled_date', 'completed_date'],
  limits: SUB_LIST_LIMITS,
  rangeColumn: 'log_date',
  ...childAccess(['performed_by']),
  async afterCreate(tx, emit, caller, _before, after) {
    if (after.completed_date != null) await completeOnEquipment(tx, emit, caller, after);
  },
  async afterUpdate(tx, emit, caller, before, after) {
    if (before.completed_date == null && after.completed_date != null) await completeOnEquipment(tx, emit, caller, after);
  },
});
