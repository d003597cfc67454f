import pg from 'pg';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { PgDialect } from 'drizzle-orm/pg-core';
import { dialectOf, transactionOn } from '../src/adapters/drizzle';
import { describeWithServers } from '../../../testing/src/servers';

type Tx = { execute(q: ReturnType<typeof sql>): Promise<{ rows: unknown[] }> };

/** Guards the drizzle-orm adapter (decision 055): fails when the dialect or the transaction classes are gone or changed. */
describeWithServers(['postgres'], 'drizzle-orm adapter', () => {
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 1 });
  afterAll(() => pool.end());

  it('reads the dialect of a node-postgres database', () => {
    expect(dialectOf(drizzle(pool))).toBeInstanceOf(PgDialect);
  });

  it('runs statements of a transaction built on a checked-out client', async () => {
    const client = await pool.connect();
    try {
      const tx = transactionOn(dialectOf(drizzle(pool)), client) as Tx;
      await client.query('begin');
      await tx.execute(sql`create temporary table adapter_t (n int) on commit drop`);
      await tx.execute(sql`insert into adapter_t values (${41} + 1)`);
      const { rows } = await tx.execute(sql`select n from adapter_t`);
      expect(rows).toEqual([{ n: 42 }]);
      await client.query('commit');
    } finally {
      client.release();
    }
  });

  it('throws when the dialect is not there', () => {
    expect(() => dialectOf({})).toThrow(/drizzle-orm adapter/);
  });
});
