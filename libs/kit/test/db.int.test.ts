import { sql } from 'drizzle-orm';
import pg from 'pg';
import { newId, openDatabase, type Database } from '@lab/kit';
import { dropFreshDatabases, freshDatabaseUrl } from '../../../testing/src/backing';
import { waitFor } from '../../../testing/src/waits';
import { describeWithServers } from '../../../testing/src/servers';

/**
 * A connection lost in the middle of a transaction (the server restarted, the
 * backend terminated, a reset on the network) rejects that transaction and
 * nothing else: the process stays up and the pool's next transaction gets a
 * working connection.
 */
const url = process.env.DATABASE_URL;
const describePg = (title: string, body: () => void) => describeWithServers(['postgres'], title, body);

/**
 * The pg clients that have emitted 'end', their last event: a lost connection's
 * socket end and the client's 'error' come before it (pg emits 'end' a tick after
 * handling them), so once its 'end' is seen nothing more can escape from it.
 */
const endedClients: pg.Client[] = [];
// eslint-disable-next-line @typescript-eslint/unbound-method -- put back as it was, and always called with a client as `this`
const realConnect = pg.Client.prototype.connect;

describePg('a connection lost during a transaction', () => {
  let dbUrl: string;
  let db: Database;
  let admin: pg.Client;
  const uncaught: unknown[] = [];
  const onUncaught = (err: unknown) => void uncaught.push(err);

  beforeAll(async () => {
    // the pool makes its clients inside @lab/kit: they are watched from here as they connect
    pg.Client.prototype.connect = function (this: pg.Client, ...args: unknown[]) {
      this.once('end', () => endedClients.push(this));
      return (realConnect as (...a: unknown[]) => unknown).apply(this, args);
    } as typeof realConnect;
    dbUrl = (await freshDatabaseUrl())!;
    db = await openDatabase({ url: dbUrl, poolSize: 2, name: `lost-${newId().slice(0, 8)}` });
    admin = new pg.Client({ connectionString: url });
    await admin.connect();
    process.on('uncaughtException', onUncaught);
  });

  afterAll(async () => {
    process.removeListener('uncaughtException', onUncaught);
    pg.Client.prototype.connect = realConnect;
    await admin.end();
    await db.close();
    await dropFreshDatabases();
  });

  /** Terminates the backend running pg_sleep in this test's database once it is there. */
  async function terminateSleeper(): Promise<void> {
    const database = new URL(dbUrl).pathname.slice(1);
    await waitFor('the sleeping statement to show up in pg_stat_activity', async () => {
      const r = await admin.query(
        `select pg_terminate_backend(pid) as done from pg_stat_activity where datname = $1 and query like '%pg_sleep%' and pid <> pg_backend_pid()`,
        [database],
      );
      return r.rows.some((x) => x.done);
    });
  }

  /** The sleeping transaction's backend is terminated: the transaction rejects, nothing escapes. */
  async function expectLostCleanly(tx: Promise<unknown>): Promise<void> {
    const outcome = tx.then(
      () => 'resolved',
      // drizzle wraps the driver's error as the cause
      (err: Error & { cause?: Error }) => err.cause?.message ?? err.message,
    );
    const ended = endedClients.length;
    await terminateSleeper();
    expect(await outcome).toMatch(/terminat|ECONNRESET/i);
    // the socket's end and the client's 'error' come after the statement's rejection:
    // neither may escape as uncaught, and the client's 'end' comes after both
    await waitFor('the lost connection to end', () => endedClients.length > ended);
    expect(uncaught).toEqual([]);
  }

  it('rejects db.tx, keeps the process up, and the next transaction works', async () => {
    await expectLostCleanly(
      db.tx(async (t) => {
        await t.execute(sql`select pg_sleep(30)`);
      }),
    );
    expect(await db.tx(async (t) => (await db.rows<{ n: number }>(sql`select 1 as n`, t))[0].n)).toBe(1);
  });

  it('rejects db.rawTx, keeps the process up, and the next transaction works', async () => {
    await expectLostCleanly(
      db.rawTx(async (raw) => {
        await raw.exec('select pg_sleep(30)');
      }),
    );
    expect(await db.rawTx(async (raw) => (await raw.query<{ n: number }>('select 1 as n'))[0].n)).toBe(1);
  });
});
