import { feedIdOf, hashFeedToken } from '@lab/equipment/calendar-token';
import { createCalendarFeedBody } from '@lab/equipment/calendar-schemas';
import { DomainError, parseWith, systemContext, type CallerContext } from '@lab/kit';
import { bucketKey } from '@lab/rate-limits';
import { json, noContent, withLocation, type CalendarOp, type Reply } from '@lab/http-api';
import { calendarText } from '../calendar-ics.js';
import { callerIn, type Ctx, type Deps } from '../request.js';
import { objectBody, recordId } from './records.js';
import type { equipmentCalendar } from '@lab/contracts';

/** Calendar feeds of equipment (decision 060): the feed tokens of the signed-in caller, and the feed itself. */
export function calendarHandler(ctx: Ctx, deps: Deps, op: CalendarOp): Promise<Reply> {
  switch (op) {
    case 'create_feed':
      return createFeed(ctx, deps);
    case 'list_feeds':
      return listFeeds(ctx, deps);
    case 'revoke_feed':
      return revokeFeed(ctx, deps);
    case 'feed':
      return feed(ctx, deps);
  }
}

/** Where the feed of a token is read: the path a calendar client subscribes to. */
const feedPath = (token: string) => `/v1/calendar/${token}.ics`;

/** A feed as the API shows it; the URL only with the token, in the answer that creates it. */
function feedView(f: equipmentCalendar.CalendarFeed) {
  return {
    id: f.id,
    name: f.name ?? null,
    equipment_id: f.equipment_id ?? null,
    created_by: f.created_by,
    created_at: f.created_at,
    last_used_at: f.last_used_at ?? null,
  };
}

async function createFeed(ctx: Ctx, deps: Deps): Promise<Reply> {
  const body = parseWith(createCalendarFeedBody, objectBody(ctx.body));
  const r = await deps.clients.equipmentCalendar().call('createCalendarFeed', body, callerIn(ctx));
  const origin = `${ctx.req.protocol}://${ctx.req.get('host') ?? 'localhost'}`;
  const reply = json(201, { data: { ...feedView(r.feed!), token: r.token, url: `${origin}${feedPath(r.token)}` } });
  return withLocation(reply, ctx.req.path, r.feed!.id);
}

async function listFeeds(ctx: Ctx, deps: Deps): Promise<Reply> {
  const r = await deps.clients.equipmentCalendar().call('listCalendarFeeds', {}, callerIn(ctx));
  return json(200, { data: r.feeds.map(feedView) });
}

async function revokeFeed(ctx: Ctx, deps: Deps): Promise<Reply> {
  await deps.clients.equipmentCalendar().call('revokeCalendarFeed', { id: recordId(ctx.params) }, callerIn(ctx));
  return noContent();
}

/**
 * Fetches of one feed are counted per bucket of its id (anonymous door: what
 * anyone may send cannot add counters without bound). A calendar client polls
 * every few minutes at most; the budget is for a leaked URL polled in a loop.
 */
export const FEED_LIMITS = { per_minute: 30, per_hour: 600 };
const FEED_BUCKETS = 2 ** 16;

const noSuchFeed = () => DomainError.notFound('calendar feed not found');

/** A refusal about the feed's creator or organisation reads like an unknown token: 404, no oracle. */
const asNoSuchFeed = (err: unknown): never => {
  if (err instanceof DomainError && (err.kind === 'not_found' || err.kind === 'forbidden' || err.kind === 'invalid')) throw noSuchFeed();
  throw err;
};

/**
 * The creator of a feed as they are now: their membership (role, department)
 * read from identity at every fetch, so a feed stops when its creator leaves
 * the organisation and shows less when their access shrinks. Only the read
 * scope, whatever the token they created it with held.
 */
async function creatorCaller(deps: Deps, requestId: string, f: equipmentCalendar.CalendarFeed): Promise<CallerContext> {
  const identity = deps.clients.identity();
  const system = systemContext(requestId);
  const [org, members] = await Promise.all([
    identity.call('getOrg', { org_id: f.org_id }, system),
    identity.call('listMembers', { org_id: f.org_id, user_ids: [f.created_by] }, system),
  ]).catch(asNoSuchFeed);
  const member = members.members.find((m) => m.user_id.toLowerCase() === f.created_by.toLowerCase());
  if (!member || !org.modules.includes('lab_equipment')) throw noSuchFeed();
  return {
    org_id: f.org_id,
    user_id: f.created_by,
    role: member.role,
    department_id: member.department_id ?? null,
    scopes: ['read'],
    token_kind: 'calendar_feed',
    token_id: f.id,
    request_id: requestId,
  };
}

/**
 * GET /v1/calendar/{token}.ics: no Authorization header (calendar clients send
 * none); the token in the path is the credential. Malformed, unknown, revoked,
 * its creator gone or its item no longer visible to them: 404 alike.
 */
async function feed(ctx: Ctx, deps: Deps): Promise<Reply> {
  const file = ctx.params.feed ?? '';
  const token = file.endsWith('.ics') ? file.slice(0, -'.ics'.length) : '';
  const feedId = feedIdOf(token);
  // a path that cannot name a feed is 404 before it is counted at all
  if (!feedId) throw noSuchFeed();
  await deps.limiter.consume(bucketKey('calendar-feed', feedId, FEED_BUCKETS), FEED_LIMITS, 'other');
  const client = deps.clients.equipmentCalendar();
  const f = await client.call('resolveCalendarFeed', { id: feedId, token_hash: hashFeedToken(token) }, systemContext(ctx.requestId));
  const caller = await creatorCaller(deps, ctx.requestId, f);
  const r = await client.call('listCalendarEntries', f.equipment_id === undefined ? {} : { equipment_id: f.equipment_id }, caller).catch(asNoSuchFeed);
  return {
    status: 200,
    body: calendarText(f.name ?? 'Equipment', r.entries),
    contentType: 'text/calendar; charset=utf-8',
    // the URL is the credential: no shared cache keeps it
    headers: { 'Cache-Control': 'private, max-age=300', 'Content-Disposition': 'inline; filename="equipment.ics"' },
  };
}
