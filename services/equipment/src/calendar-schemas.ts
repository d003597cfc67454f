import { z } from 'zod';

/**
 * The body of POST /v1/calendar-feeds, for the equipment service (which
 * validates it) and the gateway's OpenAPI document (one schema, decision 026).
 */
export const createCalendarFeedBody = z.strictObject({
  /** what the creator calls it in their list of feeds */
  name: z.string().trim().min(1).max(200).optional(),
  /** the one item the feed shows; absent: every item the creator can see */
  equipment_id: z.uuid().optional(),
});
