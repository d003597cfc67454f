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
