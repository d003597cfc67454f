import { PUBLIC_EVENT_PREFIXES } from '@lab/contracts';
/**
 * Which events outbound subscriptions can name. The public events are those of
 * the spec's table plus the additions of other services under the same
 * prefixes (stock_item.*, environmental.*); audit records and identity's
 * internal notices are never delivered.
 */
export const PUBLIC_PREFIXES = PUBLIC_EVENT_PREFIXES;


const EXACT = new RegExp(`^(${PUBLIC_PREFIXES.join('|')})(\\.[a-z0-9_]+){1,4}$`);
const WILDCARD = new RegExp(`^(${PUBLIC_PREFIXES.join('|')})\\.\\*$`);

/** An exact public event name, `<prefix>.*`, or `*`. */
export function isValidFilter(filter: string): boolean {
  return filter === '*' || WILDCARD.test(filter) || EXACT.test(filter);
}

export function isPublicEvent(type: string): boolean {
  return EXACT.test(type);
}

/**
 * `*` matches every public event; `<prefix>.*` every event whose first segment
 * is the prefix, however many segments follow (so `equipment.*` matches
 * `equipment.usage.started`, which a one-segment AMQP-style `*` would not);
 * anything else matches exactly.
 */
export function filterMatches(filter: string, type: string): boolean {
  if (!isPublicEvent(type)) return false;
  if (filter === '*') return true;
  if (filter.endsWith('.*')) return type.startsWith(filter.slice(0, -1));
  return filter === type;
}

export const subscribed = (filters: string[], type: string) => filters.some((f) => filterMatches(f, type));
