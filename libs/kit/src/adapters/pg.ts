import type { Socket } from 'node:net';
import type pg from 'pg';

/**
 * Adapter to pg's private fields, pinned to pg 8.23.1 (decision 055; guarded by
 * test/library-adapters.pg.int.test.ts).
 */

/**
 * The socket of a client of pg's pool (`client.connection.stream`, not part of pg's
 * API), so that statements sent one after another leave in one write (pg-connection.ts,
 * coalesceWrites; decision 034). Throws when it is not there: every client this is
 * given comes from a pg.Pool, whose connections have it in the pinned version.
 */
export function socketOf(client: pg.PoolClient): Socket {
  const stream = (client as unknown as { connection?: { stream?: Socket } }).connection?.stream;
  if (typeof stream?.cork !== 'function' || typeof stream.uncork !== 'function') {
    throw new Error('pg adapter: client.connection.stream is not a socket (the pinned 8.23.1 has one); see decision 055');
  }
  return stream;
}

type QueryFn = (config: unknown, values?: unknown, callback?: unknown) => unknown;

/**
 * Gives every plain query config sent on the pool's connections (what drizzle sends,
 * inside transactions too) the statement name `nameOf` returns, by replacing `query`
 * on each new connection: pg has no hook between a caller's query and its Parse
 * message, and naming statements halved PostgreSQL's CPU per request on the read path
 * (db.ts, StatementNames). Throws on a connection whose `query` is not a function.
 */
export function nameEveryQuery(pool: pg.Pool, nameOf: (config: { text?: unknown; name?: unknown }, values: unknown) => string | undefined): void {
  pool.on('connect', (client) => {
    if (typeof client.query !== 'function') throw new Error('pg adapter: a pooled client without query(); see decision 055');
    const query = client.query.bind(client) as QueryFn;
    (client as unknown as { query: QueryFn }).query = (config, values, callback) => {
      // a plain config object (not a Query a caller built: that one is sent as it is)
      if (config && typeof config === 'object' && typeof (config as { submit?: unknown }).submit !== 'function') {
        const c = config as { text?: unknown; name?: unknown };
        const name = nameOf(c, values);
        if (name !== c.name) return query({ ...c, name }, values, callback);
      }
      return query(config, values, callback);
    };
  });
}
