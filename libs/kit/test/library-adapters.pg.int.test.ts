import { Socket } from 'node:net';
import pg from 'pg';
import { nameEveryQuery, socketOf } from '../src/adapters/pg';
import { describeWithServers } from '../../../testing/src/servers';

/** Guards the pg adapter (decision 055): fails when `connection.stream` or the per-connection query are gone or changed. */
describeWithServers(['postgres'], 'pg adapter', () => {
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 1 });
  nameEveryQuery(pool, (c) => (c.text === 'select $1::int + 1 as n' ? 'lab_adapter_test' : undefined));
  afterAll(() => pool.end());

  it('gives the socket of a pooled client', async () => {
    const client = await pool.connect();
    try {
      const socket = socketOf(client);
      expect(socket).toBeInstanceOf(Socket);
      socket.cork();
      const answer = client.query('select 1 as one');
      socket.uncork();
      expect((await answer).rows).toEqual([{ one: 1 }]);
    } finally {
      client.release();
    }
  });

  it('names the statements sent on every connection', async () => {
    // a config object, as drizzle sends it
    expect((await pool.query({ text: 'select $1::int + 1 as n' }, [1])).rows).toEqual([{ n: 2 }]);
    const client = await pool.connect();
    try {
      const { rows } = await client.query<{ name: string }>('select name from pg_prepared_statements');
      expect(rows.map((r) => r.name)).toContain('lab_adapter_test');
    } finally {
      client.release();
    }
  });

  it('throws when the socket is not there', () => {
    expect(() => socketOf({} as unknown as pg.PoolClient)).toThrow(/pg adapter/);
    expect(() => socketOf({ connection: {} } as unknown as pg.PoolClient)).toThrow(/pg adapter/);
  });
});
