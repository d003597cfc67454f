/** The kinds of stock movement, and the sign each one's quantity_delta must have. */
export const MOVEMENT_TYPES = ['consume', 'restock', 'adjustment', 'transfer', 'dispose'] as const;
export type MovementType = (typeof MOVEMENT_TYPES)[number];

/**
 * consume and dispose take stock out (negative), restock puts it in (positive),
 * an adjustment corrects a count either way. A transfer is recorded as one
 * movement per stock item involved: negative on the item the stock leaves,
 * positive on the item it arrives at, so it may have either sign. Zero is
 * never a movement.
 */
const SIGN: Record<MovementType, 'negative' | 'positive' | 'either'> = {
  consume: 'negative',
  dispose: 'negative',
  restock: 'positive',
  adjustment: 'either',
  transfer: 'either',
};

/** Why a delta does not fit its movement type, or null when it does. */
export function signProblem(type: MovementType, delta: number): string | null {
  if (delta === 0) return 'must not be zero';
  const sign = SIGN[type];
  if (sign === 'negative' && delta > 0) return `must be negative for a ${type} movement`;
  if (sign === 'positive' && delta < 0) return `must be positive for a ${type} movement`;
  return null;
}

/**
 * The same rule as JSON Schema, for the OpenAPI document (zod's superRefine does
 * not travel into it): a quantity_delta that is never zero, negative or positive
 * as its movement_type says, so generated clients and validators know it.
 */
export function signRuleSchema(): Record<string, unknown>[] {
  const typesOf = (sign: 'negative' | 'positive') => MOVEMENT_TYPES.filter((t) => SIGN[t] === sign);
  const when = (types: readonly string[], delta: Record<string, unknown>) => ({
    if: { properties: { movement_type: { enum: [...types] } }, required: ['movement_type'] },
    then: { properties: { quantity_delta: delta } },
  });
  return [
    { not: { properties: { quantity_delta: { const: 0 } }, required: ['quantity_delta'] } },
    when(typesOf('negative'), { exclusiveMaximum: 0 }),
    when(typesOf('positive'), { exclusiveMinimum: 0 }),
  ];
}
