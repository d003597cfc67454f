import pg from 'pg';
import { waitFor } from './waits.js';

/** A transaction held open on a connection of its own, for tests of what waits on its locks. */
export interface HeldTransaction {
  /** Resolves once `n` other sessions of the database wait for a lock; fails after 10 s. */
  waiters(n?: number): Promise<void>;
  commit(): Promise<void>;
  /** Rolls back what was not committed and closes the connection. */
  close(): Promise<void>;
}

/**
 * Opens a transaction on `databaseUrl`, runs `hold` in it (taking the locks a test
 * needs held: a row deleted, locked or inserted and not yet committed) and keeps it
 * open. A race test then starts the request under test, waits until it is blocked
 * on those locks (`waiters`) and only then commits: the request meets the race
 * every time, rather than when a sleep happened to be long enough.
 */
export async function holdTransaction(databaseUrl: string, hold: (db: pg.Client) => Promise<unknown>): Promise<HeldTransaction> {
  const db = new pg.Client({ connectionString: databaseUrl });
  await db.connect();
  let open = false;
  try {
    await db.query('begin');
    open = true;
    await hold(db);
  } catch (err) {
    await db.end().catch(() => undefined);
    throw err;
  }
  return {
    async waiters(n = 1) {
      await waitFor(`${n} session(s) waiting for the held locks`, async () => {
        const r = await db.query<{ n: number }>(
          `select count(*)::int as n from pg_stat_activity
           where datname = current_database() and pid <> pg_backend_pid() and wait_event_type = 'Lock'`,
        );
        return r.rows[0]!.n >= n;
      });
    },
    async commit() {
      await db.query('commit');
      open = false;
    },
    async close() {
      if (open) await db.query('rollback').catch(() => undefined);
      await db.end().catch(() => undefined);
    },
  };
}
