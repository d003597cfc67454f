import type pg from 'pg';
import { NodePgSession, NodePgTransaction } from 'drizzle-orm/node-postgres';
import { PgDialect } from 'drizzle-orm/pg-core';
import type { PGlite, QueryOptions, Results, Transaction } from '@electric-sql/pglite';
import { giveDrizzleParsers, withoutKnownParsers } from './pglite-parsers.js';

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

/** What drizzle's PGlite session calls on its client: a PGlite instance, or the embedded engine's handle. */
export interface PgliteQueries {
  query<T>(text: string, params?: unknown[], options?: QueryOptions): Promise<Results<T>>;
  transaction<T>(fn: (tx: Pick<Transaction, 'query'>) => Promise<T>): Promise<T>;
}

/**
 * The PGlite client drizzle is given on the embedded database. PGlite merges a
 * query's own `parsers` into a copy of all its parsers (over 300: one per array
 * type) on every query; drizzle passes its nine with every query, so each paid
 * that copy: about 200 us of a 300-500 us statement, measured with PGlite 0.5.16
 * (decision 063). The instance is given those nine itself (its public `parsers`,
 * giveDrizzleParsers: on the engine's thread when `client` is the embedded
 * engine's handle), and this client leaves them out of each query, so the answers
 * are the same and the copy is not made (nor, to the engine's thread, functions
 * sent that cannot cross). Options naming any other parser go through unchanged.
 * drizzle calls only `query` and `transaction` on its client (and `query` on the
 * transaction's); test/library-adapters.drizzle.int.test.ts checks that what it
 * passes is still these nine.
 */
export function pgliteClientForDrizzle(client: PgliteQueries | PGlite): PGlite {
  if ('parsers' in client) giveDrizzleParsers(client);
  const inTx = (tx: Pick<Transaction, 'query'>): Pick<Transaction, 'query'> => ({
    query: <T>(text: string, params?: unknown[], options?: QueryOptions) => tx.query<T>(text, params, withoutKnownParsers(options)),
  });
  const forDrizzle: PgliteQueries = {
    query: <T>(text: string, params?: unknown[], options?: QueryOptions) => client.query<T>(text, params, withoutKnownParsers(options)),
    transaction: <T>(fn: (tx: Pick<Transaction, 'query'>) => Promise<T>) => client.transaction((tx) => fn(inTx(tx))),
  };
  return forDrizzle as unknown as PGlite;
}
