import { sql } from 'drizzle-orm';
import { z } from 'zod';
import { isoTimestamp, rows, validationFailed, type Tx } from '@lab/kit';
import { defineResource } from '@lab/records';
import { name, reference, text } from './fields.js';
import { assertTransition, INVENTORY_STATUSES, type InventoryStatus } from './inventory-status.js';
import { canWriteInventory } from './permissions.js';

const createInventory = z.strictObject({
  name,
  notes: text.nullable().optional(),
  scope_room_id: reference.nullable().optional(),
  scope_location_id: reference.nullable().optional(),
  // open by default; a run recorded after the fact may be created closed or archived,
  // closed now by the caller (closed_at and closed_by are the close's, set with it)
  status: z.enum(INVENTORY_STATUSES, `must be one of ${INVENTORY_STATUSES.join(', ')}`).optional(),
});

/** A client clock a little ahead of ours may still record the close as "now". */
const CLOCK_SKEW_MS = 300_000;

async function transactionTime(tx: Tx): Promise<string> {
  const [row] = await rows<{ now: string }>(tx, sql`select to_json(now()) #>> '{}' as now`);
  return row!.now;
}

/** The scope is fixed at creation: a count over a changed scope would be a different run. */
const updateInventory = z.strictObject({
  name: name.optional(),
  notes: text.nullable().optional(),
  status: z.enum(INVENTORY_STATUSES, `must be one of ${INVENTORY_STATUSES.join(', ')}`).optional(),
  closed_at: isoTimestamp().optional(),
  closed_by: reference.optional(),
});

/**
 * Physical inventory runs: open -> closed -> archived (see inventory-status.ts).
 * Closing records closed_at and closed_by: the values of the closing request
 * when it gives them (a count finished earlier and recorded afterwards;
 * closed_at may not lie in the future), else now() and the calling user.
 * closed_at / closed_by in any other request are a 400: they describe the close
 * and change only with it.
 */
export const inventories = defineResource({
  name: 'inventories',
  record: 'inventory',
  table: 'inventory.inventories',
  auditResource: 'inventory',
  create: createInventory,
  update: updateInventory,
  labels: ['name'],
  filters: { status: 'string', scope_room_id: 'uuid', scope_location_id: 'uuid', name: 'string' },
  orderBy: ['updated_at', 'name', 'status', 'closed_at'],
  // scope_room_id and scope_location_id are not checked: no service keeps rooms or
  // storage locations (docs/decisions.md, "References")
  references: { closed_by: { noun: 'member', peer: 'member' } },
  canWrite: canWriteInventory,
  async beforeCreate(tx, caller, input) {
    const status = input.status ?? 'open';
    if (status === 'open') return { ...input, status };
    return { ...input, status, closed_at: await transactionTime(tx), closed_by: caller.user_id };
  },
  async beforeUpdate(tx, caller, input, before) {
    const from = before.status as InventoryStatus;
    const to = input.status ?? from;
    assertTransition(from, to);
    const closing = from === 'open' && to === 'closed';
    if (!closing) {
      const stray = (['closed_at', 'closed_by'] as const).filter((f) => input[f] !== undefined);
      if (stray.length) {
        throw validationFailed(stray.map((f) => ({ path: f, message: `${f} can only be given with the request that closes the run (status closed)` })));
      }
      return input;
    }
    if (input.closed_at !== undefined && Date.parse(input.closed_at) > Date.now() + CLOCK_SKEW_MS) {
      throw validationFailed([{ path: 'closed_at', message: 'closed_at must not lie in the future' }]);
    }
    return {
      ...input,
      // the transaction's now(), the same instant as the updated_at of this change
      closed_at: input.closed_at ?? (await transactionTime(tx)),
      closed_by: input.closed_by ?? caller.user_id,
    };
  },
});
