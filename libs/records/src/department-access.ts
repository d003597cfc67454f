import { sql, type SQL } from 'drizzle-orm';
import type { CallerContext } from '@lab/kit';
import { mayWriteRecord, readReach, type RecordRule } from '@lab/permissions';
import type { RecordJson } from './resource.js';

export interface RecordAccess {
  canRead(caller: CallerContext): SQL | undefined;
  canWrite(caller: CallerContext, row: RecordJson): boolean;
}

/**
 * The organisation's department and ownership rule (libs/permissions
 * records.ts) as the hooks of a resource whose table has a department_id:
 * the read reach becomes the list's SQL predicate over the table alias `t`,
 * the write rule the record-level write check. `owners` are the columns that
 * make a user the record's author or owner.
 */
export function departmentAccess(owners: string[], opts: Omit<RecordRule, 'owners'> = {}): RecordAccess {
  const rule: RecordRule = { ...opts, owners };
  return {
    canRead(caller) {
      const reach = readReach(caller);
      if (reach.all) return undefined;
      const visible = [sql`t.department_id is null`];
      if (reach.department_id) visible.push(sql`t.department_id = ${reach.department_id}::uuid`);
      for (const o of owners) visible.push(sql`t.${sql.identifier(o)} = ${reach.user_id}::uuid`);
      return sql.join(visible, sql` or `);
    },
    canWrite: (caller, row) => mayWriteRecord(caller, row, rule),
  };
}

/**
 * The write rule alone, for a resource every member reads (laboratory stock)
 * or whose rows carry no department of their own (records under a piece of
 * equipment: their rule then reaches admins, writers of unassigned records and
 * their owners).
 */
export const recordWriteRule =
  (owners: string[], opts: Omit<RecordRule, 'owners'> = {}) =>
  (caller: CallerContext, row: RecordJson): boolean =>
    mayWriteRecord(caller, row, { ...opts, owners });
