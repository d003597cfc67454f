import { sql } from 'drizzle-orm';
import pg from 'pg';
import { metrics, newId, openDatabase, POINT_READ, rows, type Database } from '@lab/kit';
import { dropFreshDatabases, freshDatabaseUrl } from '../../../testing/src/backing';
import { waitFor } from '../../../testing/src/waits';
import { describeWithServers } from '../../../testing/src/servers';

/**
 * Shared reads (shared-reads.ts) on a real PostgreSQL: statements outside a
 * transaction begun in the same turn go out on one connection, each still in its
 * own implicit transaction with its own error, and the connection goes back to
 * the pool once all have their answers.
 */
const describePg = (title: string, body: () => void) => describeWithServers(['postgres'], title, body);

describePg('shared reads', () => {
  let db: Database;
  let url: string;
  const name = `reads-${newId().slice(0, 8)}`;
  /** connections of this test's pool on the server */
  const opened = async (admin: pg.Client) =>
    Number((await admin.query<{ n: string }>('select count(*) as n from pg_stat_activity where application_name = $1', [name])).rows[0]!.n);

  beforeAll(async () => {
    url = (await freshDatabaseUrl())!;
    db = await openDatabase({ url, poolSize: 4, name });
    await db.orm.execute(sql`create table marks (id int primary key, pid int)`);
  });

  afterAll(async () => {
    await db.close();
    await dropFreshDatabases();
  });

  const backend = async () => (await rows<{ pid: number }>(db.orm, sql`${POINT_READ}select pg_backend_pid() as pid`))[0]!.pid;
  const xid = async () => (await rows<{ xid: string }>(db.orm, sql`${POINT_READ}select txid_current()::text as xid`))[0]!.xid;

  it('sends the statements begun in the same turn on one connection, and counts them', async () => {
    const count = async () => [(await metrics().sharedReads.get()).values[0]?.value ?? 0, (await metrics().sharedReadGroups.get()).values[0]?.value ?? 0];
    const [reads, groups] = await count();
    const pids = await Promise.all(Array.from({ length: 10 }, () => backend()));
    expect(new Set(pids).size).toBe(1);
    expect(await count()).toEqual([reads! + 10, groups! + 1]);
  });

  it('takes another connection for the statements of a full group', async () => {
    // 32 a group: the 33rd statement of the turn starts the next one
    const pids = await Promise.all(Array.from({ length: 40 }, () => backend()));
    expect(new Set(pids.slice(0, 32)).size).toBe(1);
    expect(new Set(pids.slice(32)).size).toBe(1);
    expect(pids[32]).not.toBe(pids[0]);
  });

  it('sends a repeated statement with parameters (a named, prepared one) in a group, each with its own values', async () => {
    // named on its second sight (db.ts): the group holds its Parse and the uses behind it
    const twice = async (n: number) => (await rows<{ v: number }>(db.orm, sql`${POINT_READ}select ${n}::int * 2 as v, pg_backend_pid() as pid`))[0]!;
    const prepared = async () =>
      (
        await rows<{ n: number }>(db.orm, sql`${POINT_READ}select count(*)::int as n from pg_prepared_statements where statement like ${'%::int * 2 as v%'}`)
      )[0]!.n;
    for (let turn = 0; turn < 2; turn++) {
      const [got, n] = await Promise.all([Promise.all(Array.from({ length: 12 }, (_, i) => twice(i))), prepared()]);
      expect(got.map((g) => g.v)).toEqual(Array.from({ length: 12 }, (_, i) => i * 2));
      expect(new Set(got.map((g) => g.pid)).size).toBe(1);
      // the mark does not keep it from being a prepared statement on the connection
      expect(n).toBe(1);
    }
  });

  it('runs each statement of a group in a transaction of its own', async () => {
    const xids = await Promise.all(Array.from({ length: 5 }, () => xid()));
    expect(new Set(xids).size).toBe(5);
  });

  it('fails a bad statement alone, with its own error', async () => {
    const outcomes = await Promise.allSettled([backend(), rows(db.orm, sql`${POINT_READ}select 1 / ${0}::int as x`), backend()]);
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    const err = (outcomes[1] as PromiseRejectedResult).reason as { code?: string; cause?: { code?: string } };
    expect(err.code ?? err.cause?.code).toBe('22012');
    // the statements around it shared its connection
    const [a, , b] = outcomes as PromiseFulfilledResult<number>[];
    expect(a!.value).toBe(b!.value);
  });

  it('leaves every statement not marked as a point read (a page, a count, a write) a connection of its own', async () => {
    const unmarked = async () => (await rows<{ pid: number }>(db.orm, sql`select pg_backend_pid() as pid`))[0]!.pid;
    const write = async () => (await rows<{ pid: number }>(db.orm, sql`insert into marks (id, pid) values (1, pg_backend_pid()) returning pid`))[0]!.pid;
    const [a, query, written, b] = await Promise.all([backend(), unmarked(), write(), backend()]);
    expect(a).toBe(b);
    expect(new Set([a, query, written]).size).toBe(3);
  });

  it('gives the connection back once every statement of its group has its answer', async () => {
    // turn after turn of reads: each group's connection is free again for the next,
    // so the pool never needs more than the one
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    try {
      await db.close();
      db = await openDatabase({ url, poolSize: 4, name });
      for (let turn = 0; turn < 20; turn++) await Promise.all(Array.from({ length: 8 }, () => backend()));
      expect(await opened(admin)).toBe(1);
    } finally {
      await admin.end();
    }
  });

  it('reports a connection lost under a group to its statements and keeps serving reads', async () => {
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    try {
      const pid = await backend();
      const slow = Promise.allSettled([rows(db.orm, sql`${POINT_READ}select pg_sleep(30)`), backend()]);
      // the group's connection is the idle one the pool hands out first
      await waitForActive(admin, pid);
      await admin.query('select pg_terminate_backend($1)', [pid]);
      const outcomes = await slow;
      expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'rejected']);
      // the process is up and the next reads get a connection that works
      expect(await Promise.all([backend(), backend()])).toEqual([expect.any(Number), expect.any(Number)]);
      expect(await backend()).not.toBe(pid);
    } finally {
      await admin.end();
    }
  });
});

/** Until the backend runs a statement (the group's sleep reached the server). */
async function waitForActive(admin: pg.Client, pid: number): Promise<void> {
  await waitFor("the sleep running on the group's connection", async () => {
    const r = await admin.query<{ state: string }>('select state from pg_stat_activity where pid = $1', [pid]);
    return r.rows[0]?.state === 'active';
  });
}
