import ical from 'ical-generator';
import type { equipmentCalendar } from '@lab/contracts';

type Entry = equipmentCalendar.CalendarEntry;

/**
 * The right-hand side of every UID: fixed, not the host a request came by, so
 * that one record keeps one UID however the feed is reached (record ids are
 * UUIDs, unique on their own).
 */
const UID_DOMAIN = 'equipment.lab-notebook';

/** How often a calendar client is asked to fetch the feed again. */
const REFRESH_SECONDS = 15 * 60;

/** SEQUENCE counts seconds from here: small enough for the 32-bit INTEGER of RFC 5545 until 2088. */
const SEQUENCE_EPOCH_MS = Date.UTC(2020, 0, 1);

/**
 * An entry's revision number from when its record last changed: it grows with
 * every change, so a calendar client replaces the event it has under the UID
 * instead of keeping both.
 */
const sequenceOf = (updatedAt: string): number => Math.max(0, Math.floor((Date.parse(updatedAt) - SEQUENCE_EPOCH_MS) / 1000));

const uidOf = (e: Pick<Entry, 'kind' | 'record_id'>): string => `${e.kind}-${e.record_id}@${UID_DOMAIN}`;

/**
 * The entries as an iCalendar object (RFC 5545), written by ical-generator,
 * which escapes text values and folds lines at 75 octets. Timed entries are in
 * UTC (`Z`), so no VTIMEZONE is needed; due dates and logs are all-day dates
 * (VALUE=DATE). DTSTAMP and LAST-MODIFIED are the record's updated_at: the
 * same record gives the same event at every fetch.
 */
export function calendarText(name: string, entries: Entry[]): string {
  // REFRESH-INTERVAL and X-PUBLISHED-TTL: how often a client should fetch again (well inside the feed's rate limit)
  const calendar = ical({ name, ttl: REFRESH_SECONDS, prodId: { company: 'lab-notebook', product: 'equipment-calendar', language: 'EN' } });
  for (const e of entries) {
    const updated = new Date(e.updated_at);
    const common = {
      id: uidOf(e),
      summary: e.summary,
      description: e.description ?? null,
      stamp: updated,
      lastModified: updated,
      sequence: sequenceOf(e.updated_at),
    };
    if (e.date !== undefined) calendar.createEvent({ ...common, start: e.date, allDay: true });
    else if (e.starts_at !== undefined)
      calendar.createEvent({ ...common, start: new Date(e.starts_at), end: e.ends_at === undefined ? null : new Date(e.ends_at) });
  }
  return calendar.toString();
}
