import { sql } from 'drizzle-orm';
import { rows, validationFailed, type CallerContext, type RecordJson, type Tx } from '@lab/kit';

/**
 * The record a reference field names, if it belongs to the caller's
 * organisation; anything else is a 400 on that field (a record of another
 * organisation is not revealed to exist).
 */
export async function sameOrgRecord(
  tx: Tx,
  caller: CallerContext,
  field: string,
  table: 'inventory.reagents' | 'inventory.stock_items',
  id: string,
): Promise<RecordJson> {
  const [found] = await rows<{ json: string }>(
    tx,
    sql`select row_to_json(t)::text as json from ${sql.raw(table)} t where t.id = ${id}::uuid and t.org_id = ${caller.org_id}::uuid`,
  );
  if (!found) throw validationFailed([{ path: field, message: `${field} does not name a record of this organisation` }]);
  return JSON.parse(found.json) as RecordJson;
}
