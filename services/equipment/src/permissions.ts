import { departmentAccess, type CallerContext, type RecordJson } from '@lab/kit';

/**
 * Equipment follows the organisation's department and ownership model
 * (libs/kit records/department-access.ts); whoever registered it owns it.
 */
export const equipmentAccess = departmentAccess(['created_by']);

/**
 * Records under a piece of equipment (usage, maintenance, documents, remote
 * link). Whoever can see the equipment may add records to it (visibility is the
 * parent check); a record is changed by whoever wrote it (or, for `owners`
 * such as a session's user_id, owns it), by admins and dept_admins, and by
 * tokens without a user. Viewers never write (enforced by the engine).
 */
export function childAccess(owners: string[] = []) {
  const mayChange = (caller: CallerContext, row: RecordJson): boolean => {
    if (!caller.user_id) return true;
    if (caller.role === 'admin' || caller.role === 'dept_admin') return true;
    return ['created_by', ...owners].some((o) => row[o] != null && row[o] === caller.user_id);
  };
  return { canWrite: mayChange, canDelete: mayChange };
}
