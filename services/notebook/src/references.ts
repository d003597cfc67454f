import { sql } from 'drizzle-orm';
import { rows, validationFailed, type CallerContext, type Tx } from '@lab/kit';

/**
 * A reference field must name a record of the caller's organisation; anything
 * else is a 400 on that field (the record's existence elsewhere is not revealed).
 */
export async function assertSameOrgReference(
  tx: Tx,
  caller: CallerContext,
  field: string,
  table: 'notebook.projects' | 'notebook.experiments' | 'notebook.samples',
  id: string | null | undefined,
): Promise<void> {
  if (id == null) return;
  const found = await rows<{ id: string }>(
    tx,
    sql`select id from ${sql.raw(table)} where id = ${id}::uuid and org_id = ${caller.org_id}::uuid`,
  );
  if (!found.length) throw validationFailed([{ path: field, message: `${field} does not name a record of this organisation` }]);
}
