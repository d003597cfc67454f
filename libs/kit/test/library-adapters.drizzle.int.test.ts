import pg from 'pg';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { PgDialect } from 'drizzle-orm/pg-core';
import { PGlite } from '@electric-sql/pglite';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { dialectOf, pgliteClientForDrizzle, transactionOn } from '../src/adapters/drizzle';
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

/**
 * Guards the PGlite client given to drizzle (decision 063): drizzle's own parsers
 * are all ones the instance was given, so none is passed with a query, and the
 * answers are what drizzle gets from PGlite itself.
 */
describe('drizzle-orm PGlite client', () => {
  const values = sql`select now() as at, '2026-01-02'::date as day, '1 day'::interval as span,
      array[1.5, 2]::numeric[] as nums, array['2026-01-02 03:04:05+00']::timestamptz[] as ats,
      '{"a": 1}'::jsonb as doc, 42::int8 as big`;
  let plain: PGlite;
  let lite: PGlite;
  beforeAll(async () => {
    [plain, lite] = await Promise.all([PGlite.create(), PGlite.create()]);
  });
  afterAll(() => Promise.all([plain.close(), lite.close()]));

  it("passes no parsers with drizzle's queries, in and out of transactions", async () => {
    const passed: unknown[] = [];
    const query = lite.query.bind(lite);
    lite.query = ((text: string, params?: unknown[], options?: { parsers?: unknown }) => {
      passed.push(options?.parsers);
      return query(text, params, options);
    }) as typeof lite.query;
    try {
      const db = drizzlePglite({ client: pgliteClientForDrizzle(lite) });
      await db.execute(values);
      expect(passed).toEqual([undefined]);
      await db.transaction(async (tx) => {
        await tx.execute(values);
      });
    } finally {
      lite.query = query;
    }
  });

  it('gives the answers drizzle gets from PGlite itself', async () => {
    const own = (await drizzlePglite(plain).execute(values)).rows[0] as Record<string, unknown>;
    const ours = (await drizzlePglite({ client: pgliteClientForDrizzle(lite) }).execute(values)).rows[0] as Record<string, unknown>;
    expect(typeof ours.at).toBe('string');
    expect({ ...ours, at: undefined }).toEqual({ ...own, at: undefined });
    const inTx = await drizzlePglite({ client: pgliteClientForDrizzle(lite) }).transaction((tx) => tx.execute(values));
    expect({ ...(inTx.rows[0] as object), at: undefined }).toEqual({ ...own, at: undefined });
  });
});
