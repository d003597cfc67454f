import { sql, type SQL } from 'drizzle-orm';
import type { CallerContext } from '../context.js';
import type { RecordJson } from './resource.js';

export interface RecordAccess {
  canRead(caller: CallerContext): SQL | undefined;
  canWrite(caller: CallerContext, row: RecordJson): boolean;
}

/**
 * The organisation's record-level permission model for records that carry a
 * department_id, shared by every service so a role means the same everywhere.
 * `owners` are the columns that make a user the record's author or owner.
 *
 * Read: admin and qm see every record of the organisation, as does a token
 * without a user; other members see records without department, of their own
 * department, and records they own.
 * Write: viewer never; admin and tokens without a user every record; dept_admin
 * records of their department or without one; researcher and qm records they
 * own or of their department.
 */
export function departmentAccess(owners: string[]): RecordAccess {
  const seesAll = (c: CallerContext) => !c.user_id || c.role === 'admin' || c.role === 'qm';
  const owns = (c: CallerContext, row: RecordJson) => owners.some((o) => row[o] != null && row[o] === c.user_id);
  const inOwnDepartment = (c: CallerContext, row: RecordJson) => c.department_id != null && row.department_id != null && row.department_id === c.department_id;

  return {
    canRead(caller) {
      if (seesAll(caller)) return undefined;
      const visible = [sql`t.department_id is null`];
      if (caller.department_id) visible.push(sql`t.department_id = ${caller.department_id}::uuid`);
      for (const o of owners) visible.push(sql`t.${sql.identifier(o)} = ${caller.user_id}::uuid`);
      return sql.join(visible, sql` or `);
    },
    canWrite(caller, row) {
      if (!caller.user_id) return true;
      switch (caller.role) {
        case 'admin':
          return true;
        case 'dept_admin':
          return row.department_id == null || inOwnDepartment(caller, row);
        case 'researcher':
        case 'qm':
          return owns(caller, row) || inOwnDepartment(caller, row);
        default:
          return false;
      }
    },
  };
}
