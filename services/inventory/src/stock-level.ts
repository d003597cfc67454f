import { sql } from 'drizzle-orm';
import { DomainError, rows, validationFailed, type CallerContext, type Tx } from '@lab/kit';

export interface StockLevel {
  /** the quantity after the change */
  quantity: number;
  unit: string;
}

/**
 * Adds delta to a stock item's quantity with one UPDATE. Its row lock
 * serialises concurrent movements of the same item (no lost update), and the
 * condition is re-checked on the newest row version after the wait, so two
 * consumptions of the last unit cannot both succeed. A change that would leave
 * less than zero is refused: 409 insufficient_stock with details
 * {available: the quantity before, requested: the amount taken out}; nothing
 * changes. `field` names the request field that pointed at the item.
 */
export async function applyDelta(tx: Tx, caller: CallerContext, stockItemId: string, delta: number, field: string): Promise<StockLevel> {
  const [changed] = await rows<{ json: string }>(
    tx,
    sql`update inventory.stock_items set quantity = quantity + ${delta}::numeric, updated_at = now()
        where id = ${stockItemId}::uuid and org_id = ${caller.org_id}::uuid and quantity + ${delta}::numeric >= 0
        returning json_build_object('quantity', quantity, 'unit', unit)::text as json`,
  );
  if (changed) return JSON.parse(changed.json) as StockLevel;
  const [current] = await rows<{ json: string }>(
    tx,
    sql`select json_build_object('available', quantity)::text as json from inventory.stock_items
        where id = ${stockItemId}::uuid and org_id = ${caller.org_id}::uuid`,
  );
  if (!current) throw validationFailed([{ path: field, message: `${field} does not name a record of this organisation` }]);
  const { available } = JSON.parse(current.json) as { available: number };
  throw DomainError.conflict(`not enough stock: ${available} available, ${-delta} requested`, 'insufficient_stock', {
    available,
    requested: -delta,
  });
}
