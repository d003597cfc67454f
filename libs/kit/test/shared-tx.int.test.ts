import { AsyncLocalStorage } from 'node:async_hooks';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { newId, openDatabase, pipelined, rows, type Database, type Tx } from '@lab/kit';
import { dropFreshDatabases, freshDatabaseUrl } from '../../../testing/src/backing';
import { describeWithServers } from '../../../testing/src/servers';

/**
 * Group commit (shared-tx.ts) on a real PostgreSQL and on the embedded one
 * (PGlite): writes begun together share one transaction, a failing one fails
 * alone with its own error while the others commit, and each runs in its own
 * async context.
 */
describeWithServers(['postgres'], 'shared transactions (group commit) on PostgreSQL', () => {
  sharedTransactionRules(
    async () => openDatabase({ url: (await freshDatabaseUrl())!, poolSize: 4, name: `shared-${newId().slice(0, 8)}` }),
    dropFreshDatabases,
  );
});

describe('shared transactions (group commit) on PGlite', () => {
  let dir: string;
  sharedTransactionRules(
    async () => {
      dir = await mkdtemp(join(tmpdir(), 'lab-shared-tx-'));
      return openDatabase({ dataDir: dir });
    },
    () => rm(dir, { recursive: true, force: true }),
  );
});

function sharedTransactionRules(open: () => Promise<Database>, cleanUp: () => Promise<void>): void {
  let db: Database;

  beforeAll(async () => {
    db = await open();
    await db.orm.execute(sql`create table items (id int primary key, note text not null)`);
  });

  afterAll(async () => {
    await db.close();
    await cleanUp();
  });

  const insert =
    (id: number, note = 'x') =>
    async (tx: Tx) => {
      await tx.execute(sql`insert into items (id, note) values (${id}, ${note})`);
      const [t] = await rows<{ xid: string }>(tx, sql`select txid_current()::text as xid`);
      return t!.xid;
    };
  const stored = async () => (await rows<{ id: number }>(db.orm, sql`select id from items order by id`)).map((r) => r.id);

  beforeEach(async () => {
    await db.orm.execute(sql`delete from items`);
  });

  it('runs the writes begun in the same moment in one transaction, and each gets its own result', async () => {
    const xids = await Promise.all([1, 2, 3, 4, 5].map((id) => db.sharedTx(insert(id))));
    expect(new Set(xids).size).toBe(1);
    expect(await stored()).toEqual([1, 2, 3, 4, 5]);
  });

  it('runs a write begun alone in a transaction of its own', async () => {
    const a = await db.sharedTx(insert(1));
    const b = await db.sharedTx(insert(2));
    expect(a).not.toBe(b);
    expect(await stored()).toEqual([1, 2]);
  });

  it('fails a bad write alone, with its own error, and commits the others', async () => {
    await db.orm.execute(sql`insert into items (id, note) values (3, 'there before')`);
    const outcomes = await Promise.allSettled([1, 2, 3, 4].map((id) => db.sharedTx(insert(id))));
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', 'fulfilled']);
    const err = (outcomes[2] as PromiseRejectedResult).reason as { code?: string; cause?: { code?: string } };
    expect(err.code ?? err.cause?.code).toBe('23505');
    // after the rollback, each ran again alone
    const xids = outcomes.filter((o) => o.status === 'fulfilled').map((o) => o.value);
    expect(new Set(xids).size).toBe(3);
    expect(await stored()).toEqual([1, 2, 3, 4]);
    const [row] = await rows<{ note: string }>(db.orm, sql`select note from items where id = 3`);
    expect(row!.note).toBe('there before');
  });

  it('fails a write whose function throws alone, and keeps nothing of it', async () => {
    const refused = async (tx: Tx) => {
      await tx.execute(sql`insert into items (id, note) values (2, 'half done')`);
      throw new Error('refused after writing');
    };
    const outcomes = await Promise.allSettled([db.sharedTx(insert(1)), db.sharedTx(refused), db.sharedTx(insert(3))]);
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(((outcomes[1] as PromiseRejectedResult).reason as Error).message).toBe('refused after writing');
    expect(await stored()).toEqual([1, 3]);
  });

  it('fails alone a write whose statement sent with the COMMIT fails, whatever its error became', async () => {
    await db.orm.execute(sql`insert into items (id, note) values (2, 'there before')`);
    const tail = (id: number) => async (tx: Tx) => {
      // as a receipt's claim does: handed over, its failure turned into the caller's own error
      pipelined(tx, () =>
        tx.execute(sql`insert into items (id, note) values (${id}, 'x')`).catch(() => {
          throw new Error(`item ${id} taken`);
        }),
      );
      return id;
    };
    const outcomes = await Promise.allSettled([1, 2, 3].map((id) => db.sharedTx(tail(id))));
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(((outcomes[1] as PromiseRejectedResult).reason as Error).message).toBe('item 2 taken');
    expect(await stored()).toEqual([1, 2, 3]);
  });

  it('runs each write in the async context it was begun in', async () => {
    const scope = new AsyncLocalStorage<string>();
    const seen = await Promise.all(
      ['a', 'b', 'c'].map((name, i) =>
        scope.run(name, () =>
          db.sharedTx(async (tx) => {
            await insert(i + 1, name)(tx);
            return scope.getStore();
          }),
        ),
      ),
    );
    expect(seen).toEqual(['a', 'b', 'c']);
  });

  it('lets the writes of a group see each other (why a resource opts in: shared-tx.ts)', async () => {
    const counts = await Promise.all(
      [1, 2, 3].map((id) =>
        db.sharedTx(async (tx) => {
          await tx.execute(sql`insert into items (id, note) values (${id}, 'x')`);
          const [c] = await rows<{ n: number }>(tx, sql`select count(*)::int as n from items`);
          return c!.n;
        }),
      ),
    );
    // pipelined in order on one connection: every insert ran before the first count,
    // which writes that ran alone, one after another, would have counted 1, 2, 3
    expect(counts).toEqual([3, 3, 3]);
  });
}
