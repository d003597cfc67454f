import { createCalendarFeedBody } from '@lab/equipment/calendar-schemas';
import type { CalendarOp } from './operations.js';
import { jsonSchemaOf, nullableOf, schemaRef, TIME, UUID, type Json } from './openapi-parts.js';

/** Calendar feeds of equipment (decision 060) in the OpenAPI document: their answers and what each operation takes. */

const FEED: Json = {
  type: 'object',
  additionalProperties: false,
  required: ['id', 'name', 'equipment_id', 'created_by', 'created_at', 'last_used_at'],
  properties: {
    id: UUID,
    name: nullableOf({ type: 'string' }),
    equipment_id: { ...nullableOf(UUID), description: 'the one item the feed shows; null: every item its creator can see' },
    created_by: { ...UUID, description: 'the user whose current access the feed shows' },
    created_at: TIME,
    last_used_at: { ...nullableOf(TIME), description: 'when a calendar last fetched it (to within 5 minutes)' },
  },
};

const CREATED_FEED: Json = {
  ...FEED,
  required: [...(FEED.required as string[]), 'token', 'url'],
  properties: {
    ...(FEED.properties as Json),
    token: { type: 'string', pattern: '^cal_[0-9a-f]{32}_[A-Za-z0-9_-]{43}$', description: 'the feed token: shown only here, kept only as a hash' },
    url: { type: 'string', format: 'uri', description: 'the feed URL to subscribe to (webcal:// works too): the token is in it' },
  },
};

export const CALENDAR_SCHEMAS: Record<string, Json> = {
  CalendarFeed: FEED,
  CalendarFeedCreatedItem: { type: 'object', additionalProperties: false, required: ['data'], properties: { data: CREATED_FEED } },
  CalendarFeedList: {
    type: 'object',
    additionalProperties: false,
    required: ['data'],
    properties: { data: { type: 'array', items: schemaRef('CalendarFeed') } },
  },
};

/** What one calendar operation takes and answers (the fields of the document's Op). */
interface CalendarOpDoc {
  successStatus: string;
  successDescription: string;
  successSchema?: Json;
  successContentType?: string;
  successHeaders?: Json;
  body?: Json;
  bodyRequired?: boolean;
  extraStatuses?: { status: string; description: string; schema?: Json; headers?: Json }[];
}

const ERROR = schemaRef('Error');

export const CALENDAR_OPS: Record<CalendarOp, CalendarOpDoc> = {
  create_feed: {
    successStatus: '201',
    successDescription:
      'a feed token of the caller (a user), with its URL; the token is shown only here. The feed shows what its creator may read at each fetch, read-only',
    successSchema: schemaRef('CalendarFeedCreatedItem'),
    body: jsonSchemaOf(createCalendarFeedBody),
    bodyRequired: false,
    extraStatuses: [{ status: '404', description: 'equipment_id names no equipment the caller can see', schema: ERROR }],
  },
  list_feeds: {
    successStatus: '200',
    successDescription: "the caller's live feeds in this organisation, newest first; never their tokens",
    successSchema: schemaRef('CalendarFeedList'),
  },
  revoke_feed: {
    successStatus: '204',
    successDescription: 'the feed is revoked: its URL answers 404 from now on',
  },
  feed: {
    successStatus: '200',
    successDescription:
      'An iCalendar object (RFC 5545): usage sessions (UTC times), maintenance and calibration records and the next due dates (all-day dates) as VEVENTs, ' +
      'with stable UIDs (<kind>-<record id>@equipment.lab-notebook) and SEQUENCE and LAST-MODIFIED from when the record changed. ' +
      'No Authorization header: {feed} is <token>.ics. A malformed, unknown or revoked token, a creator who left the organisation or lost sight of the item: 404 alike.',
    successContentType: 'text/calendar',
    successSchema: { type: 'string', description: 'text/calendar; charset=utf-8' },
    extraStatuses: [
      {
        status: '429',
        description: 'the feed was fetched too often (counted per feed); retry after Retry-After seconds',
        schema: ERROR,
        headers: { 'Retry-After': { $ref: '#/components/headers/Retry-After' } },
      },
    ],
  },
};
