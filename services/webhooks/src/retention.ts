import { sql } from 'drizzle-orm';
import { deleteInBatches, type Database } from '@lab/kit';

/**
 * How long the webhooks schema keeps what it has finished with. A delivery is
 * history once delivered or failed (the deliveries list shows the recent ones,
 * and the auto-disable rule looks back only to the last success, which goes no
 * earlier than the failures after it); an inbound event is only needed to answer
 * a sender's retry as a duplicate, and senders retry within hours. Pending
 * deliveries and events still waiting for their job are never removed, whatever
 * their age.
 */
const before = (days: number) => sql`now() - (${days} * interval '1 day')`;

export const purgeSettledDeliveries = (db: Database, retentionDays: number): Promise<number> =>
  deleteInBatches(db, 'webhooks.deliveries', sql`status <> 'pending' and created_at < ${before(retentionDays)}`);

export const purgeInboundEvents = (db: Database, retentionDays: number): Promise<number> =>
  deleteInBatches(db, 'webhooks.inbound_events', sql`received_at < ${before(retentionDays)} and job_status is distinct from 'pending'`);
