import { sql } from 'drizzle-orm';
import type { CallerContext } from '../context.js';
import { rows, type Tx } from '../db.js';
import { validationFailed } from './validation.js';
import type { RecordJson } from './resource.js';

/**
 * The record a reference field names, if it belongs to the caller's organisation;
 * anything else is a 400 on that field (a record of another organisation is not
 * revealed to exist). `table` is a schema-qualified table of the calling service,
 * a constant of its code. References into another service's records are not
 * checked (docs/decisions.md, "References"). The row is held (FOR KEY SHARE) to
 * the end of the write's transaction: a delete at the same moment waits, rather
 * than leaving the write's foreign key to fail (a 500) after this check said yes.
 */
export async function sameOrgRecord(tx: Tx, caller: CallerContext, field: string, table: string, id: string): Promise<RecordJson> {
  const [found] = await rows<{ json: string }>(
    tx,
    sql`select row_to_json(t)::text as json from ${sql.raw(table)} t where t.id = ${id}::uuid and t.org_id = ${caller.org_id}::uuid
        for key share of t`,
  );
  if (!found) throw validationFailed([{ path: field, message: `${field} does not name a record of this organisation` }]);
  return JSON.parse(found.json) as RecordJson;
}

/** As sameOrgRecord, for a reference that may be absent (null or not given). */
export async function assertSameOrgReference(
  tx: Tx,
  caller: CallerContext,
  field: string,
  table: string,
  id: string | null | undefined,
): Promise<void> {
  if (id == null) return;
  const found = await rows<{ id: string }>(
    tx,
    sql`select t.id from ${sql.raw(table)} t where t.id = ${id}::uuid and t.org_id = ${caller.org_id}::uuid for key share of t`,
  );
  if (!found.length) throw validationFailed([{ path: field, message: `${field} does not name a record of this organisation` }]);
}
