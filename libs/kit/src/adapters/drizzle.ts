import type pg from 'pg';
import { NodePgSession, NodePgTransaction } from 'drizzle-orm/node-postgres';
import { PgDialect } from 'drizzle-orm/pg-core';
import { types as pgliteTypes, type PGlite, type QueryOptions, type Transaction } from '@electric-sql/pglite';

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

/**
 * The types whose text drizzle-orm 0.45.4's PGlite session asks to be given as it
 * comes (`parsers` of every query it sends: each maps the text to itself), so that
 * it maps dates and arrays of them itself, as on node-postgres.
 */
const DRIZZLE_RAW_TYPES: ReadonlySet<number> = new Set([
  pgliteTypes.TIMESTAMP,
  pgliteTypes.TIMESTAMPTZ,
  pgliteTypes.INTERVAL,
  pgliteTypes.DATE,
  1231, // numeric[]
  1115, // timestamp[]
  1185, // timestamptz[]
  1187, // interval[]
  1182, // date[]
]);

const asText = (value: string): string => value;

/** The options of a query without its `parsers`, when they are only the ones the instance already has. */
function withoutKnownParsers(options: QueryOptions | undefined): QueryOptions | undefined {
  const parsers = options?.parsers;
  if (!parsers) return options;
  for (const type of Object.keys(parsers)) if (!DRIZZLE_RAW_TYPES.has(Number(type))) return options;
  const { parsers: _known, ...rest } = options;
  return rest;
}

/**
 * The PGlite client drizzle is given on the embedded database. PGlite merges a
 * query's own `parsers` into a copy of all its parsers (over 300: one per array
 * type) on every query; drizzle passes its nine with every query, so each paid
 * that copy: about 200 us of a 300-500 us statement, measured with PGlite 0.5.16
 * (decision 063). The instance is given those nine itself (its public `parsers`),
 * and this client leaves them out of each query, so the answers are the same and
 * the copy is not made. Options naming any other parser go through unchanged.
 * drizzle calls only `query` and `transaction` on its client (and `query` on the
 * transaction's); test/library-adapters.drizzle.int.test.ts checks that what it
 * passes is still these nine.
 */
export function pgliteClientForDrizzle(lite: PGlite): PGlite {
  for (const type of DRIZZLE_RAW_TYPES) lite.parsers[type] = asText;
  const inTx = (tx: Transaction): Transaction =>
    Object.create(tx, {
      query: { value: <T>(text: string, params?: unknown[], options?: QueryOptions) => tx.query<T>(text, params, withoutKnownParsers(options)) },
    }) as Transaction;
  const client = {
    query: <T>(text: string, params?: unknown[], options?: QueryOptions) => lite.query<T>(text, params, withoutKnownParsers(options)),
    transaction: <T>(fn: (tx: Transaction) => Promise<T>) => lite.transaction((tx) => fn(inTx(tx))),
  };
  return client as unknown as PGlite;
}
