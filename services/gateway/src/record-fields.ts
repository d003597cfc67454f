/**
 * Create fields of the generic CRUD resources, as the spec lists them. The owning
 * services validate bodies with their own zod schemas, which the gateway does not
 * import (it forwards JSON untouched); this table exists only to describe those
 * bodies in the OpenAPI document. The services stay the authority on what is
 * accepted: a field the spec omits may still be refused or allowed there.
 */
export type FieldType = 'string' | 'number' | 'uuid' | 'date' | 'date-time' | 'uri' | 'object' | 'string[]' | 'boolean' | readonly string[];

export interface RecordFields {
  /** one line for the schema's description */
  title: string;
  fields: Record<string, FieldType>;
  /** required on create */
  required: string[];
  /** false when the resource has no update route */
  updatable?: boolean;
}

const strings = (names: string[]): Record<string, FieldType> => Object.fromEntries(names.map((n) => [n, 'string' as const]));
const typed = (names: string[], type: FieldType): Record<string, FieldType> => Object.fromEntries(names.map((n) => [n, type]));

export const RECORD_FIELDS: Record<string, RecordFields> = {
  experiments: {
    title: 'Experiment (laboratory entry)',
    fields: { title: 'string', description: 'string', content: 'object', status: 'string', tags: 'string[]', project_id: 'uuid', template_id: 'uuid' },
    required: [],
  },
  projects: {
    title: 'Project',
    fields: {
      name: 'string',
      description: 'string',
      status: 'string',
      tags: 'string[]',
      department_id: 'uuid',
      lead_researcher_id: 'uuid',
      parent_project_id: 'uuid',
      start_date: 'date',
    },
    required: ['name'],
  },
  samples: {
    title: 'Sample',
    fields: {
      name: 'string',
      type: 'string',
      status: 'string',
      metadata: 'object',
      storage_location: 'string',
      department_id: 'uuid',
      owner_id: 'uuid',
    },
    required: ['name'],
  },
  equipment: {
    title: 'Equipment',
    fields: {
      name: 'string',
      ...strings(['manufacturer', 'model', 'serial_number', 'status', 'location', 'notes']),
      tags: 'string[]',
      ...typed(['department_id', 'room_id', 'storage_location_id'], 'uuid'),
      ...typed(['last_maintenance_date', 'next_maintenance_date'], 'date'),
    },
    required: ['name'],
  },
  'equipment/usage': {
    title: 'Equipment usage session (one open session per equipment)',
    fields: {
      ...typed(['started_at', 'ended_at'], 'date-time'),
      purpose: 'string',
      ...typed(['project_id', 'entry_id'], 'uuid'),
      settings: 'object',
      notes: 'string',
    },
    required: [],
  },
  'equipment/maintenance': {
    title: 'Equipment maintenance record',
    fields: {
      maintenance_type: ['scheduled', 'unscheduled', 'repair', 'inspection'],
      ...typed(['scheduled_date', 'completed_date', 'next_maintenance_date'], 'date'),
      ...strings(['description', 'result']),
      performed_by: 'uuid',
      severity: ['low', 'normal', 'high', 'critical'],
    },
    required: ['maintenance_type'],
  },
  // free-form objects: any keys except the service-set id, equipment_id, created_*, updated_at
  'equipment/calibrations': { title: 'Equipment calibration (free-form object)', fields: {}, required: [] },
  'equipment/qualifications': { title: 'Equipment qualification (free-form object)', fields: {}, required: [] },
  'equipment/remote': {
    title: 'Equipment remote link (POST and PUT upsert; url is needed when there is no link yet)',
    fields: {
      url: 'uri',
      protocol: ['http', 'https', 'vnc', 'rdp', 'ssh', 'vendor', 'other'],
      ...strings(['label', 'notes']),
      enabled: 'boolean',
    },
    required: [],
  },
  reagents: {
    title: 'Reagent catalog entry',
    fields: {
      name: 'string',
      ...strings([
        'alias',
        'cas_number',
        'formula',
        'purity',
        'aggregate_state',
        'storage_temperature',
        'storage_class',
        'un_number',
        'description',
        'notes',
      ]),
      ...typed(['molecular_weight', 'density', 'flash_point'], 'number'),
      signal_word: ['danger', 'warning', 'none'],
      ...typed(['h_phrases', 'p_phrases', 'hazard_pictograms'], 'string[]'),
      external_link: 'uri',
      department_id: 'uuid',
    },
    required: ['name'],
  },
  'stock-items': {
    title: 'Stock item',
    fields: {
      catalog_id: 'uuid',
      quantity: 'number',
      unit: 'string',
      ...strings([
        'name_suffix',
        'manufacturer',
        'supplier',
        'article_number',
        'order_number',
        'lot_number',
        'lot_status',
        'container_material',
        'cost_center',
        'project_number',
        'intended_use',
        'notes',
      ]),
      ...typed(['package_size_full', 'package_size_current', 'purchase_price', 'min_stock'], 'number'),
      ...typed(['storage_location_id', 'department_id'], 'uuid'),
      ...typed(['acquired_on', 'opened_on', 'expires_on', 'inspected_on'], 'date'),
    },
    required: ['catalog_id', 'quantity', 'unit'],
  },
  'stock-movements': {
    title: 'Stock movement (created and read; never updated)',
    fields: {
      stock_item_id: 'uuid',
      movement_type: ['consume', 'restock', 'adjustment', 'transfer', 'dispose'],
      quantity_delta: 'number',
      reason: 'string',
      intended_use: 'string',
      entry_id: 'uuid',
    },
    required: ['stock_item_id', 'movement_type', 'quantity_delta'],
    updatable: false,
  },
  inventories: {
    title: 'Inventory run',
    fields: {
      name: 'string',
      notes: 'string',
      scope_room_id: 'uuid',
      scope_location_id: 'uuid',
      status: ['open', 'closed', 'archived'],
      closed_at: 'date-time',
      closed_by: 'uuid',
    },
    required: ['name'],
  },
};
