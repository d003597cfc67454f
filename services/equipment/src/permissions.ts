import { departmentAccess, recordWriteRule } from '@lab/records';

/**
 * Equipment follows the organisation's department and ownership rule
 * (libs/permissions records.ts); whoever registered it owns it.
 */
export const equipmentAccess = departmentAccess(['created_by']);

/**
 * Records under a piece of equipment (usage, maintenance, documents, remote
 * link) carry no department: whoever can see the equipment may add records to
 * it (visibility is the parent check), and the same rule reaches them as any
 * record without a department: admins and dept_admins change and delete every
 * one, other writers those they own, by `created_by` or by one of `owners`
 * (a session's user_id, a log's performer).
 */
export function childAccess(owners: string[] = []) {
  const mayChange = recordWriteRule(['created_by', ...owners]);
  return { canWrite: mayChange, canDelete: mayChange };
}
