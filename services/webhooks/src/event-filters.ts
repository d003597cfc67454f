import { PUBLIC_EVENT_PREFIXES } from '@lab/contracts';

/**
 * The one list of events outbound subscriptions can name: the spec's table and
 * the additions other services publish (stock_item, environmental, lab_order,
 * lab_result). Validation, its error message, the OpenAPI document and the
 * README's events block are all made from it; a unit test checks that every
 * public event the services emit is here and that the README says the same.
 * Audit records and identity's internal notices are never delivered.
 */
const SPEC_EVENTS = [
  'experiment.created',
  'experiment.status_changed',
  'experiment.signed',
  'sample.created',
  'sample.status_changed',
  'stock_movement.created',
  'equipment.usage.started',
  'equipment.usage.completed',
  'equipment.maintenance.completed',
] as const;
/** Published by services beside the spec's table; adding events is not a breaking change. */
const ADDED_EVENTS = ['stock_item.below_min_stock', 'environmental.breach', 'lab_order.created', 'lab_result.released'] as const;

export const SUBSCRIBABLE_EVENTS: readonly string[] = [...SPEC_EVENTS, ...ADDED_EVENTS];

const PUBLIC_PREFIXES = PUBLIC_EVENT_PREFIXES;

/** `<prefix>.*` for every public prefix, then `*`: the filters a subscription may name besides exact events. */
export const SUBSCRIBABLE_WILDCARDS: readonly string[] = [...PUBLIC_PREFIXES.map((p) => `${p}.*`), '*'];

/** Everything a subscription's `events` may hold, in the order the documents show it. */
export const SUBSCRIBABLE_FILTERS: readonly string[] = [...SUBSCRIBABLE_EVENTS, ...SUBSCRIBABLE_WILDCARDS];

/** The sentence of a refused filter, listing what is accepted. */
export const FILTER_MESSAGE = `must be one of the events ${SUBSCRIBABLE_EVENTS.join(', ')} or one of the filters ${SUBSCRIBABLE_WILDCARDS.join(', ')}`;

const EXACT = new RegExp(`^(${PUBLIC_PREFIXES.join('|')})(\\.[a-z0-9_]+){1,4}$`);

/** A subscribable event name, `<prefix>.*`, or `*`. */
export function isValidFilter(filter: string): boolean {
  return SUBSCRIBABLE_FILTERS.includes(filter);
}

/** Whether an event on the bus may go to subscribers at all (a public prefix). */
function isPublicEvent(type: string): boolean {
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

/** Markers of the README block that lists the subscribable events (kept equal to the code by a unit test). */
export const EVENTS_BLOCK_START = '<!-- subscribable-events: generated from services/webhooks/src/event-filters.ts -->';
export const EVENTS_BLOCK_END = '<!-- /subscribable-events -->';

/** The README block: the events and filters a subscription may name. */
export function eventsMarkdown(): string {
  return [
    EVENTS_BLOCK_START,
    '| Subscribable event | Source |',
    '|---|---|',
    ...SPEC_EVENTS.map((e) => `| \`${e}\` | in the spec |`),
    ...ADDED_EVENTS.map((e) => `| \`${e}\` | an addition to the spec |`),
    '',
    `Filters: ${SUBSCRIBABLE_WILDCARDS.map((w) => `\`${w}\``).join(', ')}.`,
    EVENTS_BLOCK_END,
  ].join('\n');
}
