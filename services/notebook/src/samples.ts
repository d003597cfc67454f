import { z } from 'zod';
import { defineResource, departmentAccess } from '@lab/records';
import { sampleEvents } from './events.js';
import { name, object, reference, status } from './fields.js';

const createSample = z.strictObject({
  name,
  type: z.string().trim().max(200).nullable().optional(),
  status: status.optional(),
  metadata: object.optional(),
  storage_location: z.string().trim().max(500).nullable().optional(),
  storage_location_id: reference.nullable().optional(),
  department_id: reference.nullable().optional(),
  owner_id: reference.nullable().optional(),
});

export const samples = defineResource({
  name: 'samples',
  record: 'sample',
  table: 'notebook.samples',
  auditResource: 'sample',
  create: createSample,
  update: createSample.partial(),
  labels: ['name'],
  filters: {
    status: 'string',
    type: 'string',
    name: 'string',
    department_id: 'uuid',
    owner_id: 'uuid',
    storage_location_id: 'uuid',
    storage_location: 'string',
  },
  orderBy: ['updated_at', 'name', 'status', 'type'],
  // storage_location_id is not checked: no service keeps storage locations (docs/decisions.md, "References")
  references: {
    department_id: { noun: 'department', peer: 'department' },
    owner_id: { noun: 'member', peer: 'member' },
  },
  ...departmentAccess(['owner_id', 'created_by']),
  // samples are registered in bursts (a LIMS batch, an instrument run), and a
  // create only inserts its row and emits
  sharedCreates: true,
  afterCreate: (_tx, emit, caller, _before, after) => sampleEvents.created(emit, caller, after),
  afterUpdate: (_tx, emit, caller, before, after) => sampleEvents.statusChanged(emit, caller, before, after),
});
