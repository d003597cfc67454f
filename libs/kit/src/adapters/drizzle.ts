import type pg from 'pg';
import { NodePgSession, NodePgTransaction } from 'drizzle-orm/node-postgres';
import { PgDialect } from 'drizzle-orm/pg-core';

/**
 * Adapter to drizzle-orm internals, pinned to 0.45.4 (decision 055; guarded by
 * test/library-adapters.drizzle.int.test.ts).
 *
 * db.tx sends BEGIN without waiting for it and COMMIT right behind the pipelined
 * statements (db.ts, pipelinedTx; decision 034: a keyed create in two round trips
 * instead of five). drizzle's public `transaction()` awaits BEGIN itself, so the
 * transaction object is built here on a checked-out client from drizzle's
 * `NodePgTransaction`/`NodePgSession` (exported, but their constructors are not
 * documented) with the database's private `dialect`.
 */

/** The dialect of a node-postgres drizzle database; throws when it is not there. */
export function dialectOf(orm: object): PgDialect {
  const dialect = (orm as { dialect?: unknown }).dialect;
  if (!(dialect instanceof PgDialect))
    throw new Error('drizzle-orm adapter: the database has no PgDialect `dialect` (the pinned 0.45.4 has one); see decision 055');
  return dialect;
}

/** A drizzle transaction whose statements go to `client` (BEGIN and COMMIT are the caller's). */
export function transactionOn(dialect: PgDialect, client: pg.PoolClient): unknown {
  const tx = new NodePgTransaction(dialect, new NodePgSession(client, dialect, undefined), undefined);
  if (typeof (tx as { execute?: unknown }).execute !== 'function')
    throw new Error('drizzle-orm adapter: NodePgTransaction without execute(); see decision 055');
  return tx;
}
