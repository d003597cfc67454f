import { sql } from 'drizzle-orm';
import type { Bus, BusMessage } from './bus.js';
import type { Database, Tx } from './db.js';
import { rows, sqlArray } from './db.js';
import { requestScope } from './context.js';
import { metrics } from './metrics.js';
import { deleteInBatches } from './retention.js';

export interface InboxConsumerOptions<P = undefined> {
  bus: Bus;
  db: Database;
  /** schema holding this service's inbox table */
  schema: string;
  queue: string;
  bindings: readonly string[];
  prefetch?: number;
  maxAttempts?: number;
  /**
   * Runs before the transaction, for calls to other services: on the embedded
   * database (one connection) a call that reads it from inside the transaction
   * would wait for that transaction forever. Its result is handed to handler.
   */
  prepare?: (msg: BusMessage) => Promise<P>;
  /** runs in the same transaction that records the message id */
  handler: (tx: Tx, msg: BusMessage, prepared: P) => Promise<void>;
}

/**
 * Consumes a durable queue exactly once per message id: the id goes into the
 * inbox table in the same transaction as the handler's writes, so a redelivered
 * duplicate finds it there and is acknowledged without effect.
 */
export async function consumeWithInbox<P = undefined>(opts: InboxConsumerOptions<P>): Promise<void> {
  const table = sql.raw(`${opts.schema}.inbox`);
  const scoped = <T>(msg: BusMessage, fn: () => Promise<T>) => requestScope.run({ request_id: msg.request_id ?? msg.id }, fn);
  await opts.bus.subscribe({
    queue: opts.queue,
    bindings: opts.bindings,
    prefetch: opts.prefetch,
    maxAttempts: opts.maxAttempts,
    handler: (msg) =>
      scoped(msg, async () => {
        const prepared = (opts.prepare ? await opts.prepare(msg) : undefined) as P;
        await opts.db.tx(async (tx) => {
          const fresh = await rows<{ id: string }>(tx, sql`insert into ${table} (id) values (${msg.id}::uuid) on conflict do nothing returning id`);
          if (!fresh.length) {
            metrics().consumed.inc({ queue: opts.queue, outcome: 'duplicate' });
            return;
          }
          await opts.handler(tx, msg, prepared);
        });
      }),
    // A batch (the in-process bus's relay batch) in one transaction: one inbox
    // insert for all ids and one commit, instead of one of each per message. All
    // or nothing: when it fails, the bus hands the messages over one by one.
    handleBatch: async (msgs) => {
      const prepared: P[] = [];
      for (const msg of msgs) prepared.push((opts.prepare ? await scoped(msg, () => opts.prepare!(msg)) : undefined) as P);
      await opts.db.tx(async (tx) => {
        const fresh = new Set(
          (
            await rows<{ id: string }>(
              tx,
              sql`insert into ${table} (id) select unnest(${sqlArray(msgs.map((m) => m.id))}::uuid[]) on conflict do nothing returning id`,
            )
          ).map((r) => r.id),
        );
        for (const [i, msg] of msgs.entries()) {
          // taken from the set once handled: an id twice in one batch is handled once
          if (!fresh.delete(msg.id)) {
            metrics().consumed.inc({ queue: opts.queue, outcome: 'duplicate' });
            continue;
          }
          await scoped(msg, () => opts.handler(tx, msg, prepared[i] as P));
        }
      });
    },
  });
}

/** Forgets inbox ids older than the redelivery horizon. */
export async function pruneInbox(db: Database, schema: string, olderThanDays = 7): Promise<number> {
  return deleteInBatches(db, `${schema}.inbox`, sql`received_at < now() - (${olderThanDays} * interval '1 day')`);
}
