import { sql } from 'drizzle-orm';
import { rows, type Executor, type Tx } from '@lab/kit';

/**
 * A monitor reports every few seconds, and a fridge left open breaches on every
 * reading until someone closes it: one notification per breaching reading would
 * give each quality manager hundreds an hour (500 from one ingest batch) and bury
 * the alert itself. So a point alerts once, then stays quiet for a while; the
 * readings and their `environmental.breach` events (for webhooks) are all kept.
 */

/** Cheap check before resolving recipients: did this point alert within the quiet period? */
export async function alertedRecently(db: Executor, org_id: string, point_key: string, quietMinutes: number): Promise<boolean> {
  if (quietMinutes <= 0) return false;
  const found = await rows<{ one: number }>(
    db,
    sql`select 1 as one from notifications.breach_alerts
        where org_id = ${org_id}::uuid and point_key = ${point_key}
          and notified_at > now() - (${quietMinutes} * interval '1 minute')`,
  );
  return found.length > 0;
}

/**
 * Takes the point's alert in the notifying transaction; false when another one
 * holds it (always true without a quiet period). Concurrent breaches of one point
 * wait on the row and then see the winner's time, so exactly one of them notifies.
 */
export async function claimAlert(tx: Tx, org_id: string, point_key: string, quietMinutes: number): Promise<boolean> {
  if (quietMinutes <= 0) return true;
  const claimed = await rows<{ one: number }>(
    tx,
    sql`insert into notifications.breach_alerts as a (org_id, point_key, notified_at)
        values (${org_id}::uuid, ${point_key}, now())
        on conflict (org_id, point_key) do update set notified_at = excluded.notified_at
          where a.notified_at <= now() - (${quietMinutes} * interval '1 minute')
        returning 1 as one`,
  );
  return claimed.length > 0;
}
