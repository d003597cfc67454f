import { may, type Caller } from './model.js';

/**
 * The department and ownership rule of records that carry a department_id and
 * owner columns (experiments, projects, samples, equipment, stock, and the
 * records under equipment, which carry no department). `owners` are the
 * columns that make a user the record's owner (author, lead, registrant).
 *
 * Read: a caller that may `read_all_departments` sees every record of the
 * organisation; anyone else sees records without a department, of their own
 * department, and records they own.
 * Write: a caller that may `write` changes the records its write_* actions
 * reach: any record, records of its department, records without a department,
 * records it owns (model.ts says which role reaches which).
 */

/** A record as its service rendered it (column name -> value). */
export type RecordRow = Record<string, unknown>;

/**
 * What a caller sees: everything, or records without a department, of
 * `department_id` (when it has one) and owned by `user_id`. A service turns
 * this into its query's predicate.
 */
export type ReadReach = { all: true } | { all: false; department_id: string | null; user_id: string };

export function readReach(caller: Caller): ReadReach {
  if (may(caller, 'read_all_departments') || !caller.user_id) return { all: true };
  return { all: false, department_id: caller.department_id ?? null, user_id: caller.user_id };
}

export interface RecordRule {
  /** the columns that make a user the record's owner */
  owners: readonly string[];
  /**
   * Records without a department are shared by every writer (laboratory stock,
   * which the whole organisation uses), rather than left to those who may
   * `write_unassigned_records`.
   */
  unassignedShared?: boolean;
}

/** Whether the caller may change `row` (an existing record, or the one a create would make). */
export function mayWriteRecord(caller: Caller, row: RecordRow, rule: RecordRule): boolean {
  if (!may(caller, 'write')) return false;
  if (may(caller, 'write_any_record')) return true;
  const department = row.department_id ?? null;
  if (department === null) {
    if (rule.unassignedShared || may(caller, 'write_unassigned_records')) return true;
  } else if (caller.department_id != null && department === caller.department_id && may(caller, 'write_department_records')) {
    return true;
  }
  const owns = rule.owners.some((o) => row[o] != null && row[o] === caller.user_id);
  return owns && may(caller, 'write_own_records');
}
