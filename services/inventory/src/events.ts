import { sql } from 'drizzle-orm';
import { rows, type CallerContext, type Emitter, type Tx } from '@lab/kit';
import { type RecordJson } from '@lab/records';

/**
 * The inventory's domain events (routing key = event name, org_id = the
 * record's organisation).
 */
const MOVEMENT_FIELDS = [
  'id',
  'stock_item_id',
  'movement_type',
  'quantity_delta',
  'quantity_after',
  'unit',
  'reason',
  'intended_use',
  'entry_id',
  'created_at',
  'created_by',
];

export function movementCreated(emit: Emitter, caller: CallerContext, movement: RecordJson): void {
  emit.event('stock_movement.created', caller.org_id, Object.fromEntries(MOVEMENT_FIELDS.map((k) => [k, movement[k] ?? null])));
}

/**
 * Emits stock_item.below_min_stock when the movement took the item from at or
 * above its min_stock to below it (not on every movement while it stays below).
 * The comparison runs in PostgreSQL on the exact numeric values.
 */
export async function belowMinStockIfCrossed(tx: Tx, emit: Emitter, caller: CallerContext, movementId: string): Promise<void> {
  const [crossed] = await rows<{ json: string }>(
    tx,
    sql`select json_build_object('stock_item_id', s.id, 'catalog_id', s.catalog_id, 'quantity', m.quantity_after,
                                 'min_stock', s.min_stock, 'unit', m.unit, 'movement_id', m.id)::text as json
        from inventory.stock_movements m
        join inventory.stock_items s on s.id = m.stock_item_id and s.org_id = m.org_id
        where m.id = ${movementId}::uuid and m.org_id = ${caller.org_id}::uuid and s.min_stock is not null
          and m.quantity_after - m.quantity_delta >= s.min_stock and m.quantity_after < s.min_stock`,
  );
  if (crossed) emit.event('stock_item.below_min_stock', caller.org_id, JSON.parse(crossed.json));
}
