import { openDatabase, type Database } from '@lab/kit';
import pg from 'pg';
import { startPgBouncer, type PgBouncer } from '../src/pgbouncer';
import { describeWithServers } from '../src/servers';

/**
 * The one session setting the services keep, TimeZone, behind a transaction-mode
 * pooler (docs/operations.md, Pooler): set by a SET on each new connection, which
 * PgBouncer tracks per client and sets again on whichever server connection it
 * links, here the one server connection another client has put in another zone.
 */
describeWithServers(['postgres'], 'the session time zone through PgBouncer in transaction mode', () => {
  const upstream = process.env.DATABASE_DIRECT_URL ?? process.env.DATABASE_URL!;
  let bouncer: PgBouncer | undefined;
  let db: Database | undefined;
  let other: pg.Client | undefined;

  beforeAll(async () => {
    // one server connection for the database: every client's statements run on it in turn
    bouncer = await startPgBouncer({ upstreamUrl: upstream, poolSize: 1, maxDbConnections: 1 });
  });

  afterAll(async () => {
    await other?.end();
    await db?.close();
    await bouncer?.stop();
  });

  it('stays UTC in JSON built by the database, on a server connection shared with a client in another zone', async () => {
    const database = new URL(upstream).pathname.slice(1);
    other = new pg.Client({ connectionString: bouncer!.url(database) });
    await other.connect();
    await other.query(`set timezone to 'America/New_York'`);
    db = await openDatabase({ url: bouncer!.url(database), poolSize: 2, name: 'pooled-zone', preparedStatements: false });

    const zoneOf = async () => {
      const [row] = await db!.rawTx((raw) =>
        raw.query<{ tz: string; json: string; pid: number }>(
          `select current_setting('timezone') as tz, to_json(timestamptz '2026-01-01 00:00:00+00')::text as json, pg_backend_pid() as pid`,
        ),
      );
      return row!;
    };
    const otherZone = async () =>
      (await other!.query<{ tz: string; pid: number }>(`select current_setting('timezone') as tz, pg_backend_pid() as pid`)).rows[0]!;

    for (let i = 0; i < 5; i++) {
      const [ours, theirs] = [await zoneOf(), await otherZone()];
      expect(ours.pid).toBe(theirs.pid);
      expect(ours.tz).toBe('UTC');
      expect(ours.json).toBe('"2026-01-01T00:00:00+00:00"');
      expect(theirs.tz).toBe('America/New_York');
    }
  });

  it('refuses a client that sends the startup `options` the services no longer send', async () => {
    const database = new URL(upstream).pathname.slice(1);
    const withOptions = new pg.Client({ connectionString: bouncer!.url(database), options: '-c TimeZone=UTC' });
    await expect(withOptions.connect()).rejects.toThrow(/unsupported startup parameter: options/);
  });
});
