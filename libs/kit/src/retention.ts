import { sql, type SQL } from 'drizzle-orm';
import { PLANNED_PER_CALL, type Database } from './db.js';

/** Rows removed per statement by deleteInBatches(). */
export const DELETE_BATCH = 5_000;

/**
 * Deletes the rows of `table` (schema-qualified, never from input) that match
 * `where`, `batch` rows per statement, until fewer than a batch are left, and
 * says how many went. Each batch is its own short transaction: a day of a busy
 * table's expired rows in one statement would hold its locks and WAL for as long
 * as it ran, and returning the rows would load them into memory only to count
 * them. Planned per call: the set of expired rows swings from none to most of
 * the table, and a kept generic plan would stay whatever it was first.
 */
export async function deleteInBatches(db: Database, table: string, where: SQL, batch = DELETE_BATCH): Promise<number> {
  const t = sql.raw(table);
  let total = 0;
  for (;;) {
    const [r] = await db.rows<{ n: number }>(
      sql`${PLANNED_PER_CALL}with gone as (
            delete from ${t} where ctid in (select ctid from ${t} where ${where} limit ${batch})
            returning 1)
          select count(*)::int as n from gone`,
    );
    const n = r?.n ?? 0;
    total += n;
    if (n < batch) return total;
  }
}
