import { z } from 'zod';
import { defineResource } from '@lab/records';
import { amount, date, reference, short, text } from './fields.js';
import { canWriteInventory } from './permissions.js';

const optional = <T extends z.ZodType>(s: T) => s.nullable().optional();

const fields = {
  catalog_id: reference,
  unit: z.string().trim().min(1, 'must not be empty').max(50),
  name_suffix: optional(short),
  manufacturer: optional(short),
  supplier: optional(short),
  article_number: optional(short),
  order_number: optional(short),
  lot_number: optional(short),
  lot_status: optional(short),
  container_material: optional(short),
  cost_center: optional(short),
  project_number: optional(short),
  intended_use: optional(short),
  notes: optional(text),
  package_size_full: optional(amount),
  package_size_current: optional(amount),
  purchase_price: optional(amount),
  min_stock: optional(amount),
  storage_location_id: optional(reference),
  department_id: optional(reference),
  acquired_on: optional(date),
  opened_on: optional(date),
  expires_on: optional(date),
  inspected_on: optional(date),
};

const createStockItem = z.strictObject({ ...fields, quantity: amount });

/**
 * After creation the quantity changes only through stock movements, so that the
 * movement log always explains it; naming it in an update is a 400 that says so.
 */
const updateStockItem = z.strictObject({
  ...z.object(fields).partial().shape,
  quantity: z.never({ error: 'quantity changes only through stock movements (POST /v1/stock-movements)' }).optional(),
});

/** Stock items: a container or lot of a catalog reagent, with its current quantity. */
export const stockItems = defineResource({
  name: 'stock-items',
  record: 'stock_item',
  table: 'inventory.stock_items',
  auditResource: 'stock_item',
  create: createStockItem,
  // no create hooks: a create inserts its row and emits (decision 034)
  sharedCreates: true,
  update: updateStockItem,
  filters: {
    catalog_id: 'uuid',
    storage_location_id: 'uuid',
    department_id: 'uuid',
    lot_number: 'string',
    lot_status: 'string',
    supplier: 'string',
    manufacturer: 'string',
    article_number: 'string',
    unit: 'string',
    expires_on: 'date',
  },
  orderBy: ['updated_at', 'expires_on', 'quantity', 'name_suffix', 'lot_number'],
  // storage_location_id is not checked: no service keeps storage locations (docs/decisions.md, "References")
  references: {
    catalog_id: { noun: 'reagent', table: 'inventory.reagents' },
    department_id: { noun: 'department', peer: 'department' },
  },
  canWrite: canWriteInventory,
});
