/**
 * What the answers of the generic CRUD resources hold beyond their bodies. The
 * bodies themselves are described from the zod schemas the owning services
 * validate with (their `record-schemas` exports); a record as answered is every
 * column of its table but org_id (row_to_json in kit's records store), so its
 * shape is: the fields the service sets (read-only, listed here with their
 * column types), and the writable fields, null when not set unless the column
 * is NOT NULL (listed in `neverNull`).
 */
type Json = Record<string, unknown>;

export interface RecordAnswer {
  /** one line for the schema's description */
  title: string;
  /** set by the service, never taken from a body: readOnly in the document */
  readOnly: Record<string, Json>;
  /** writable fields whose column is NOT NULL (a default fills them) */
  neverNull: string[];
  /** a free-form object: its own keys are answered beside the read-only fields */
  freeForm?: boolean;
}

const nullable = (s: Json): Json => ({ ...s, type: [s.type as string, 'null'] });
const uuid: Json = { type: 'string', format: 'uuid' };
const time: Json = { type: 'string', format: 'date-time' };

/** The columns every record table has (org_id is never answered). */
const COMMON: Record<string, Json> = {
  id: uuid,
  created_by: { ...nullable(uuid), description: 'the user who created it; null for an API key acting as no user' },
  created_at: time,
  updated_at: time,
};
const child = { equipment_id: uuid };

export const RECORD_ANSWERS: Record<string, RecordAnswer> = {
  experiments: {
    title: 'Experiment (laboratory entry)',
    readOnly: {
      ...COMMON,
      display_id: { type: 'string', pattern: '^EXP-\\d+$', examples: ['EXP-000001'] },
      author_id: nullable(uuid),
      signed_at: nullable(time),
      signed_by: nullable(uuid),
      version: { type: 'integer', minimum: 1 },
      amends_id: nullable(uuid),
      amendment_reason: nullable({ type: 'string' }),
    },
    neverNull: ['content', 'status', 'tags'],
  },
  projects: { title: 'Project', readOnly: COMMON, neverNull: ['name', 'status', 'tags'] },
  samples: { title: 'Sample', readOnly: COMMON, neverNull: ['name', 'status', 'metadata'] },
  equipment: { title: 'Equipment', readOnly: COMMON, neverNull: ['name', 'status', 'tags'] },
  'equipment/usage': {
    title: 'Equipment usage session (one open session per equipment)',
    readOnly: {
      ...COMMON,
      ...child,
      user_id: nullable(uuid),
      duration_minutes: { ...nullable({ type: 'integer' }), description: 'set when the session ends' },
      auto_closed: { type: 'boolean', description: 'closed by the service after the longest allowed session' },
    },
    neverNull: ['started_at', 'settings'],
  },
  'equipment/maintenance': {
    title: 'Equipment maintenance record',
    readOnly: { ...COMMON, ...child, log_date: nullable({ type: 'string', format: 'date' }) },
    neverNull: ['maintenance_type', 'severity'],
  },
  'equipment/calibrations': { title: 'Equipment calibration (free-form object)', readOnly: { ...COMMON, ...child }, neverNull: [], freeForm: true },
  'equipment/qualifications': { title: 'Equipment qualification (free-form object)', readOnly: { ...COMMON, ...child }, neverNull: [], freeForm: true },
  'equipment/remote': {
    title: 'Equipment remote link',
    readOnly: { ...COMMON, ...child },
    neverNull: ['url', 'protocol', 'enabled'],
  },
  reagents: { title: 'Reagent catalog entry', readOnly: COMMON, neverNull: ['name', 'h_phrases', 'p_phrases', 'hazard_pictograms'] },
  'stock-items': { title: 'Stock item', readOnly: COMMON, neverNull: ['catalog_id', 'quantity', 'unit'] },
  'stock-movements': {
    title: 'Stock movement (created and read; never updated)',
    readOnly: {
      ...COMMON,
      quantity_after: { type: 'number', description: "the stock item's quantity once this movement applied" },
      unit: { type: 'string', description: "the stock item's unit" },
    },
    neverNull: ['stock_item_id', 'movement_type', 'quantity_delta'],
  },
  inventories: { title: 'Inventory run', readOnly: COMMON, neverNull: ['name', 'status'] },
};
