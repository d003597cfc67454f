import { sql } from 'drizzle-orm';
import { currentIdempotencyKey, type CallerContext } from '../context.js';
import type { Database, Tx } from '../db.js';
import { rows } from '../db.js';

/**
 * Receipts of keyed writes. The gateway keeps the outcome of each
 * Idempotency-Key, but stores it after the owning service has committed: a gateway
 * that dies in between leaves the key in progress, and once it counts as
 * abandoned the client's retry would write a second time. So the records engine
 * also keeps, in the write's own transaction, the answer it gave under the key;
 * the retry's transaction then fails (on the receipt's primary key, or earlier,
 * as a delete finding no record), rolls back everything it did, and the first
 * answer is given again. Receipts are scoped by the signed organisation and
 * token (the key itself travels unsigned), and kept as long as the gateway keeps
 * outcomes (24 hours).
 */

const RETENTION_HOURS = 24;

export interface ReceiptScope {
  org_id: string;
  token_id: string;
  key: string;
}

/** The receipt scope of the keyed call being served, or undefined for one without a key. */
export function receiptScope(caller: CallerContext): ReceiptScope | undefined {
  const key = currentIdempotencyKey();
  if (!key || !caller.org_id || !caller.token_id) return undefined;
  return { org_id: caller.org_id, token_id: caller.token_id, key };
}

const table = (schema: string) => sql.raw(`${schema}.idempotency_receipts`);

/** Inserts the receipt in the write's transaction; a second one for the key fails the transaction. */
export async function storeReceipt(tx: Tx, schema: string, scope: ReceiptScope, response: string | null): Promise<void> {
  await tx.execute(
    sql`insert into ${table(schema)} (org_id, token_id, key, response)
        values (${scope.org_id}::uuid, ${scope.token_id}, ${scope.key}, ${response})`,
  );
}

/** The answer stored under the key: the record's JSON, or null for a delete. */
export async function findReceipt(db: Database, schema: string, scope: ReceiptScope): Promise<{ response: string | null } | undefined> {
  const [found] = await rows<{ response: string | null }>(
    db.orm,
    sql`select response from ${table(schema)}
        where org_id = ${scope.org_id}::uuid and token_id = ${scope.token_id} and key = ${scope.key}`,
  );
  return found;
}

/** Forgets receipts past the gateway's retention of outcomes. */
export async function pruneReceipts(db: Database, schema: string): Promise<void> {
  await db.orm.execute(sql`delete from ${table(schema)} where created_at < now() - (${RETENTION_HOURS} * interval '1 hour')`);
}
