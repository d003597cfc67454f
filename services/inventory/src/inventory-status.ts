import { DomainError } from '@lab/kit';

export const INVENTORY_STATUSES = ['open', 'closed', 'archived'] as const;
export type InventoryStatus = (typeof INVENTORY_STATUSES)[number];

/**
 * An inventory run is counted while open, closed once the count is done, then
 * archived. It never goes back: a closed run cannot reopen and archived is
 * final. Keeping the status it has is not a transition and always allowed.
 */
const NEXT: Record<InventoryStatus, InventoryStatus[]> = {
  open: ['closed'],
  closed: ['archived'],
  archived: [],
};

export function isAllowedTransition(from: InventoryStatus, to: InventoryStatus): boolean {
  return from === to || NEXT[from].includes(to);
}

/** 409 invalid_transition with {from, to, allowed} unless the move is allowed. */
export function assertTransition(from: InventoryStatus, to: InventoryStatus): void {
  if (isAllowedTransition(from, to)) return;
  throw DomainError.conflict(`an inventory run cannot go from ${from} to ${to}`, 'invalid_transition', {
    from,
    to,
    allowed: NEXT[from],
  });
}
