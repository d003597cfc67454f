import { timingSafeEqual } from 'node:crypto';
import { sql } from 'drizzle-orm';
import type { equipmentCalendar } from '@lab/contracts';
import { DomainError, isGuid, newId, parseWith, type CallerContext, type ServiceDeps } from '@lab/kit';
import { findRecord } from '@lab/records';
import { createCalendarFeedBody } from './calendar-schemas.js';
import { hashFeedToken, newFeedToken } from './calendar-token.js';
import { equipment } from './equipment.js';

type Feed = equipmentCalendar.CalendarFeed;

interface FeedRow {
  id: string;
  org_id: string;
  created_by: string;
  name: string | null;
  equipment_id: string | null;
  created_at: string;
  last_used_at: string | null;
}

const utc = (column: string) => sql.raw(`to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`);
const FEED_COLUMNS = sql`id::text, org_id::text, created_by::text, name, equipment_id::text,
  ${utc('created_at')} as created_at, ${utc('last_used_at')} as last_used_at`;

const toFeed = (r: FeedRow): Feed => ({
  id: r.id,
  org_id: r.org_id,
  created_by: r.created_by,
  created_at: r.created_at,
  ...(r.name !== null ? { name: r.name } : {}),
  ...(r.equipment_id !== null ? { equipment_id: r.equipment_id } : {}),
  ...(r.last_used_at !== null ? { last_used_at: r.last_used_at } : {}),
});

/** What the audit log keeps of a feed: never its hash. */
const snapshot = (f: Feed) => ({ id: f.id, name: f.name ?? null, equipment_id: f.equipment_id ?? null, created_by: f.created_by });

/**
 * A feed shows what its creator may read, evaluated at every fetch: so it has a
 * creator, a user of the organisation. A token without a user (an API key of
 * the organisation) has no one whose access could end it.
 */
function creatorOf(caller: CallerContext): { org_id: string; user_id: string } {
  if (!caller.org_id) throw DomainError.forbidden('no organisation selected', 'org_required');
  if (!caller.user_id) {
    throw DomainError.forbidden(
      'a calendar feed is created by a user (a personal access token, an OAuth token or an API key bound to a user)',
      'user_required',
    );
  }
  return { org_id: caller.org_id, user_id: caller.user_id };
}

/** Creates a feed owned by the caller; the plain token is in the answer only. */
export async function createCalendarFeed(
  deps: ServiceDeps,
  caller: CallerContext,
  req: equipmentCalendar.CreateCalendarFeedRequest,
): Promise<equipmentCalendar.CreatedCalendarFeed> {
  const { org_id, user_id } = creatorOf(caller);
  const input = parseWith(createCalendarFeedBody, { name: req.name, equipment_id: req.equipment_id });
  return deps.outbox.write(caller, async (tx, emit) => {
    const equipmentId = input.equipment_id?.toLowerCase();
    // key share: the item cannot be deleted between this check and the insert
    if (equipmentId && !(await findRecord(tx, equipment, caller, equipmentId, { lock: 'key share' }))) {
      throw DomainError.notFound('equipment not found');
    }
    const id = newId();
    const token = newFeedToken(id);
    const [row] = await deps.db.rows<FeedRow>(
      sql`insert into equipment.calendar_feeds (id, org_id, created_by, name, equipment_id, token_hash)
          values (${id}, ${org_id}, ${user_id}, ${input.name ?? null}, ${equipmentId ?? null}, ${hashFeedToken(token)})
          returning ${FEED_COLUMNS}`,
      tx,
    );
    const feed = toFeed(row!);
    emit.audit(org_id, { action: 'create', resource: 'calendar_feed', record_id: id, after: snapshot(feed) });
    return { feed, token };
  });
}

/** The caller's live feeds in the caller's organisation, newest first. */
export async function listCalendarFeeds(deps: ServiceDeps, caller: CallerContext): Promise<equipmentCalendar.ListCalendarFeedsResponse> {
  const { org_id, user_id } = creatorOf(caller);
  const rows = await deps.db.rows<FeedRow>(
    sql`select ${FEED_COLUMNS} from equipment.calendar_feeds
        where org_id = ${org_id} and created_by = ${user_id} and revoked_at is null
        order by created_at desc, id desc limit 500`,
  );
  return { feeds: rows.map(toFeed) };
}

/** Revokes one of the caller's feeds: its URL answers 404 from now on. */
export async function revokeCalendarFeed(deps: ServiceDeps, caller: CallerContext, id: string): Promise<void> {
  const { org_id, user_id } = creatorOf(caller);
  if (!isGuid(id)) throw DomainError.notFound('calendar feed not found');
  await deps.outbox.write(caller, async (tx, emit) => {
    const [row] = await deps.db.rows<FeedRow>(
      sql`update equipment.calendar_feeds set revoked_at = now()
          where id = ${id}::uuid and org_id = ${org_id} and created_by = ${user_id} and revoked_at is null
          returning ${FEED_COLUMNS}`,
      tx,
    );
    if (!row) throw DomainError.notFound('calendar feed not found');
    emit.audit(org_id, { action: 'delete', resource: 'calendar_feed', record_id: id, before: snapshot(toFeed(row)) });
  });
}

const notFound = () => DomainError.notFound('calendar feed not found');

/**
 * The live feed a token names: its row by id, then the token's hash against the
 * stored one in constant time. Unknown id, wrong secret, revoked: one answer.
 */
export async function resolveCalendarFeed(deps: ServiceDeps, req: equipmentCalendar.ResolveCalendarFeedRequest): Promise<Feed> {
  if (!isGuid(req.id) || !/^[0-9a-f]{64}$/.test(req.token_hash)) throw notFound();
  const [row] = await deps.db.rows<FeedRow & { token_hash: string; touch: boolean }>(
    sql`select ${FEED_COLUMNS}, token_hash,
          (last_used_at is null or last_used_at < now() - interval '5 minutes') as touch
        from equipment.calendar_feeds where id = ${req.id}::uuid and revoked_at is null`,
  );
  // compared whether or not a row was found, so a miss takes as long as a wrong secret
  const stored = Buffer.from(row?.token_hash ?? '0'.repeat(64), 'hex');
  const given = Buffer.from(req.token_hash, 'hex');
  if (!timingSafeEqual(stored, given) || !row) throw notFound();
  // informational only, and off the answer's path (as identity does for tokens)
  if (row.touch) {
    deps.db
      .rows(sql`update equipment.calendar_feeds set last_used_at = now() where id = ${row.id}::uuid`)
      .catch((err: unknown) => deps.log.debug({ err, feed_id: row.id }, 'last_used_at not updated'));
  }
  return toFeed(row);
}
