import type { CallerContext } from '@lab/kit';
import { assertMayWriteRecord, mayWriteRecord, type RecordRule } from '@lab/permissions';
import type { RecordJson } from '@lab/records';

/**
 * Inventory records follow the organisation's department and ownership rule
 * (libs/permissions records.ts) for writes, with one difference of the domain:
 * stock is shared laboratory property, so every member reads every record (no
 * canRead predicate) and every writer changes the records that belong to no
 * department. Whoever created a record owns it. Deleting stays with
 * administrators (the engine's default).
 */
const INVENTORY: RecordRule = { owners: ['created_by'], unassignedShared: true };

export const canWriteInventory = (caller: CallerContext, row: RecordJson): boolean => mayWriteRecord(caller, row, INVENTORY);

/** The write rule of a record another one depends on (a movement's stock item). */
export function assertMayWriteInventory(caller: CallerContext, row: RecordJson, what: string): void {
  assertMayWriteRecord(caller, row, INVENTORY, what);
}
