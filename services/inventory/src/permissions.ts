import { DomainError, type CallerContext, type RecordJson } from '@lab/kit';

/**
 * Record-level permissions of inventory records. Stock is shared laboratory
 * property, so every member of the organisation reads every record (no
 * canRead predicate). Writes by role:
 * - viewer: never (the engine refuses before this runs);
 * - admin, and a token without a user: every record;
 * - dept_admin, researcher, qm: records without a department, of their own
 *   department, or created by themselves;
 * - any other role: nothing.
 * Deleting stays with administrators (the engine's default).
 */
export function canWriteInventory(caller: CallerContext, row: RecordJson): boolean {
  if (!caller.user_id) return true;
  switch (caller.role) {
    case 'admin':
      return true;
    case 'dept_admin':
    case 'researcher':
    case 'qm':
      return (
        row.department_id == null ||
        (caller.department_id != null && row.department_id === caller.department_id) ||
        (row.created_by != null && row.created_by === caller.user_id)
      );
    default:
      return false;
  }
}

/** The write rule of a record another one depends on (a movement's stock item). */
export function assertMayWriteInventory(caller: CallerContext, row: RecordJson, what: string): void {
  if (!canWriteInventory(caller, row)) throw DomainError.forbidden(`no permission to change this ${what}`);
}
