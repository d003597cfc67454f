import { sql } from 'drizzle-orm';
import { deleteInBatches, type Database } from '@lab/kit';

/**
 * A notification is a message about a record, not the record: after a year it is
 * news to no one, and the entry, sample or job it points to stays where it is.
 * Without a horizon every role broadcast and every event reaction would add rows
 * for ever. LAB_NOTIFICATIONS_RETENTION_DAYS changes it (at least 7 days).
 */
/** Deletes notifications older than the retention, read or not; says how many. */
export function purgeExpired(db: Database, retentionDays: number): Promise<number> {
  return deleteInBatches(db, 'notifications.notifications', sql`created_at < now() - (${retentionDays} * interval '1 day')`);
}
