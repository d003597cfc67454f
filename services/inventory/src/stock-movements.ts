import { z } from 'zod';
import { DomainError } from '@lab/kit';
import { defineResource, sameOrgRecord } from '@lab/records';
import { belowMinStockIfCrossed, movementCreated } from './events.js';
import { number, reference, short, text } from './fields.js';
import { MOVEMENT_TYPES, signProblem, signRuleSchema } from './movement-rules.js';
import { assertMayWriteInventory } from './permissions.js';

import { applyDelta } from './stock-level.js';

const createMovement = z
  .strictObject({
    stock_item_id: reference,
    movement_type: z.enum(MOVEMENT_TYPES, `must be one of ${MOVEMENT_TYPES.join(', ')}`),
    quantity_delta: number,
    reason: text.nullable().optional(),
    intended_use: short.nullable().optional(),
    // an experiment entry of the notebook service (checked there, see references)
    entry_id: reference.nullable().optional(),
  })
  .superRefine((m, ctx) => {
    const problem = signProblem(m.movement_type, m.quantity_delta);
    if (problem) ctx.addIssue({ code: 'custom', path: ['quantity_delta'], message: `quantity_delta ${problem}` });
  })
  .meta({ allOf: signRuleSchema() });

/**
 * Stock movements: the append-only log of a stock item's quantity. Creating one
 * applies its delta to the item in the same transaction and records the
 * resulting quantity_after and the item's unit on the movement. There is no
 * update (UpdateRecord answers method_not_allowed, see server.ts). Deleting one
 * (administrators only) reverses its delta, refused with 409
 * insufficient_stock when the item no longer holds what a restock added.
 */
export const stockMovements = defineResource({
  name: 'stock-movements',
  record: 'stock_movement',
  table: 'inventory.stock_movements',
  auditResource: 'stock_movement',
  create: createMovement,
  // never used: the handler refuses updates before parsing
  update: z.strictObject({}),
  filters: {
    stock_item_id: 'uuid',
    movement_type: 'string',
    entry_id: 'uuid',
    created_by: 'uuid',
  },
  orderBy: ['quantity_delta'],
  // stock_item_id is checked by beforeCreate, which needs the item itself
  references: { entry_id: { noun: 'experiment entry', peer: 'notebook.experiments' } },
  async beforeCreate(tx, caller, input) {
    const item = await sameOrgRecord(tx, caller, 'stock_item_id', 'inventory.stock_items', input.stock_item_id, 'stock item');
    // consuming stock is changing the stock item: its write rule applies
    assertMayWriteInventory(caller, item, 'stock item');
    const level = await applyDelta(tx, caller, input.stock_item_id, input.quantity_delta, 'stock_item_id');
    return { ...input, quantity_after: level.quantity, unit: level.unit };
  },
  async afterCreate(tx, emit, caller, _before, after) {
    movementCreated(emit, caller, after);
    await belowMinStockIfCrossed(tx, emit, caller, String(after.id));
  },
  async afterDelete(tx, _emit, caller, before) {
    await applyDelta(tx, caller, String(before.stock_item_id), -Number(before.quantity_delta), 'id');
  },
});

export const refuseMovementUpdate = (): never => {
  throw new DomainError('method_not_allowed', 'method_not_allowed', 'stock movements cannot be changed; delete and record a new one');
};
