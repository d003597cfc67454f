import { sql } from 'drizzle-orm';
import { messageFromRow, NOTIFICATION_SHAPE, type notifications } from '@lab/contracts';
import { newId, rows, sqlArray, type Emitter, type Executor, type Tx } from '@lab/kit';

/** What every notification of one create carries; the recipients differ. */
export interface NotificationContent {
  notification_type: string;
  title: string;
  body: string | null;
  link_url: string | null;
  entry_id: string | null;
}

/** The read shape of the spec, rendered by PostgreSQL. */
const READ_COLUMNS = sql`id, notification_type, title, body, link_url, entry_id, read_at, created_at`;

const TABLE = sql`notifications.notifications`;

/**
 * Stores one notification per recipient in one insert from arrays, in the
 * caller's transaction, with one `notification.created` event each and one
 * audit record for the whole create.
 */
export async function insertNotifications(tx: Tx, emit: Emitter, org_id: string, user_ids: string[], c: NotificationContent): Promise<string[]> {
  const ids = user_ids.map(() => newId());
  // the recipients travel as two array parameters: a role may hold thousands of
  // users, more than one statement's 65,535 bind parameters would allow as VALUES rows
  const created = await rows<{ id: string; user_id: string; created_at: string }>(
    tx,
    sql`insert into ${TABLE} (id, org_id, user_id, notification_type, title, body, link_url, entry_id)
        select r.id, ${org_id}::uuid, r.user_id, ${c.notification_type}, ${c.title}, ${c.body}, ${c.link_url}, ${c.entry_id}::uuid
        from unnest(${sqlArray(ids)}::uuid[], ${sqlArray(user_ids)}::uuid[]) as r(id, user_id)
        returning id, user_id, created_at`,
  );
  for (const r of created) {
    emit.event('notification.created', org_id, {
      id: r.id,
      user_id: r.user_id,
      notification_type: c.notification_type,
      title: c.title,
      entry_id: c.entry_id,
      created_at: r.created_at,
    });
  }
  emit.audit(org_id, {
    action: 'create',
    resource: 'notifications',
    record_id: null,
    after: { ...c, recipients: user_ids, notification_ids: ids },
  });
  return ids;
}

export interface Page {
  notifications: notifications.Notification[];
  count: number;
  total: number;
}

const notification = (row: Record<string, unknown>) => messageFromRow(NOTIFICATION_SHAPE, row) as unknown as notifications.Notification;

/** One page of a user's notifications, newest first (ties by id). */
export async function listForUser(db: Executor, org_id: string, user_id: string, limit: number, offset: number): Promise<Page> {
  const [page] = await rows<{ json: string; count: number; total: string }>(
    db,
    sql`with page as (
          select ${READ_COLUMNS} from ${TABLE}
          where org_id = ${org_id}::uuid and user_id = ${user_id}::uuid
          order by created_at desc, id desc limit ${limit} offset ${offset})
        select coalesce((select json_agg(p order by p.created_at desc, p.id desc) from page p), '[]')::text as json,
               (select count(*) from page)::int as count,
               (select count(*) from ${TABLE} where org_id = ${org_id}::uuid and user_id = ${user_id}::uuid)::text as total`,
  );
  return { notifications: (JSON.parse(page!.json) as Record<string, unknown>[]).map(notification), count: page!.count, total: Number(page!.total) };
}

/** Sets or clears read_at of one of the user's notifications; undefined when it is not theirs. */
export async function setRead(
  tx: Tx,
  org_id: string,
  user_id: string,
  id: string,
  read: boolean,
): Promise<{ before: Record<string, unknown>; after: Record<string, unknown>; notification: notifications.Notification } | undefined> {
  const [row] = await rows<{ before: Record<string, unknown>; after: string }>(
    tx,
    sql`with old as (
          select ${READ_COLUMNS} from ${TABLE}
          where id = ${id}::uuid and org_id = ${org_id}::uuid and user_id = ${user_id}::uuid for update),
        upd as (
          update ${TABLE} n set read_at = case when ${read} then coalesce(n.read_at, now()) else null end
          from old where n.id = old.id
          returning n.id, n.notification_type, n.title, n.body, n.link_url, n.entry_id, n.read_at, n.created_at)
        select (select row_to_json(old) from old) as before, (select row_to_json(upd)::text from upd) as after from old`,
  );
  if (!row) return undefined;
  const after = JSON.parse(row.after) as Record<string, unknown>;
  return { before: row.before, after, notification: notification(after) };
}
