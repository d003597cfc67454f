import { z } from 'zod';
import { DomainError, type CallerContext, type Tx } from '@lab/kit';
import { defineResource, findRecord } from '@lab/records';
import { date, name, reference, shortText, status, tags, text } from './fields.js';
import { equipmentAccess } from './permissions.js';

const createEquipment = z.strictObject({
  name,
  manufacturer: shortText.nullable().optional(),
  model: shortText.nullable().optional(),
  serial_number: shortText.nullable().optional(),
  status: status.optional(),
  location: shortText.nullable().optional(),
  notes: text.nullable().optional(),
  tags: tags.optional(),
  department_id: reference.nullable().optional(),
  room_id: reference.nullable().optional(),
  storage_location_id: reference.nullable().optional(),
  last_maintenance_date: date.nullable().optional(),
  next_maintenance_date: date.nullable().optional(),
});

export const equipment = defineResource({
  name: 'equipment',
  record: 'equipment',
  table: 'equipment.equipment',
  create: createEquipment,
  // no create hooks: a create inserts its row and emits (decision 034)
  sharedCreates: true,
  update: createEquipment.partial(),
  labels: ['name'],
  filters: {
    name: 'string',
    status: 'string',
    manufacturer: 'string',
    model: 'string',
    serial_number: 'string',
    location: 'string',
    department_id: 'uuid',
    room_id: 'uuid',
    storage_location_id: 'uuid',
    next_maintenance_date: 'date',
  },
  orderBy: ['updated_at', 'name', 'status', 'last_maintenance_date', 'next_maintenance_date'],
  // room_id and storage_location_id are not checked: no service keeps rooms or
  // storage locations (docs/decisions.md, "References")
  references: { department_id: { noun: 'department', peer: 'department' } },
  ...equipmentAccess,
});

/**
 * The parent check of every record under /v1/equipment/{id}: equipment of
 * another organisation or hidden from the caller answers like a missing one.
 */
async function assertEquipmentVisible(tx: Tx, caller: CallerContext, equipmentId: string, forInsert = false): Promise<void> {
  const found = await findRecord(tx, equipment, caller, equipmentId, forInsert ? { lock: 'key share' } : {});
  if (!found) throw DomainError.notFound('equipment not found');
}

/** The `parent` option of the equipment's sub-resources. */
export const underEquipment = { column: 'equipment_id', check: assertEquipmentVisible };
