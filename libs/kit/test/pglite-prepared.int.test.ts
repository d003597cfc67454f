import { PGlite } from '@electric-sql/pglite';
import { PreparedQueries } from '../src/adapters/pglite-prepared';
import { giveDrizzleParsers } from '../src/adapters/pglite-parsers';

/**
 * The embedded engine's prepared statements: a text sent repeatedly runs as a
 * named statement, and what a caller gets is what PGlite's own `query` gives.
 */
describe('prepared statements on PGlite (PreparedQueries)', () => {
  let lite: PGlite;
  let queries: PreparedQueries;
  const prepared = async () => (await lite.query<{ statement: string }>('select statement from pg_prepared_statements')).rows.map((r) => r.statement);

  beforeAll(async () => {
    lite = await PGlite.create();
    await lite.exec(`SET TimeZone = 'UTC'`);
    giveDrizzleParsers(lite);
    queries = new PreparedQueries(lite);
    await lite.exec(`create table t (id int primary key, tags text[], doc jsonb, at timestamptz, ok boolean, note text check (note <> 'bad'))`);
  });
  afterAll(() => lite.close());
  beforeEach(() => lite.query('delete from t'));

  const insert = 'insert into t (id, tags, doc, at, ok, note) values ($1, $2, $3, $4, $5, $6) returning *';
  const read = 'select id, tags, doc, at, ok, note, 1.5::numeric as n, null::uuid as none from t where id = $1';

  it('prepares a parameterised text the second time it is sent, and answers as PGlite does', async () => {
    const at = new Date('2026-01-02T03:04:05Z');
    for (const id of [1, 2, 3]) await queries.query(insert, [id, ['a', 'b,c'], { k: [id] }, at, id % 2 === 0, null]);
    expect(await prepared()).toEqual(expect.arrayContaining([insert]));
    for (const options of [undefined, { rowMode: 'array' as const }]) {
      await queries.query(read, [2], options);
      const mine = await queries.query(read, [2], options);
      const theirs = await lite.query(read, [2], options);
      expect(mine.rows).toEqual(theirs.rows);
      expect(mine.fields).toEqual(theirs.fields);
      expect(mine.rows).toHaveLength(1);
    }
    expect(await prepared()).toEqual(expect.arrayContaining([read]));
    const [row] = (await queries.query<Record<string, unknown>>(read, [3])).rows;
    expect(row).toEqual({ id: 3, tags: ['a', 'b,c'], doc: { k: [3] }, at: '2026-01-02 03:04:05+00', ok: false, note: null, n: '1.5', none: null });
    const updated = await queries.query('update t set note = $1 where id >= $2', ['x', 2]);
    expect((await queries.query('update t set note = $1 where id >= $2', ['y', 1])).affectedRows).toBe(3);
    expect(updated.affectedRows).toBe(2);
  });

  it('fails a prepared statement with the error PGlite gives, and the session goes on', async () => {
    await queries.query(insert, [10, [], {}, null, true, 'fine']);
    await queries.query(insert, [11, [], {}, null, true, 'fine']);
    const duplicate = await queries.query(insert, [10, [], {}, null, true, 'again']).catch((e: unknown) => e);
    expect(duplicate).toMatchObject({ code: '23505', constraint: 't_pkey', table: 't', query: insert });
    const checked = await queries.query(insert, [12, [], {}, null, true, 'bad']).catch((e: unknown) => e);
    expect(checked).toMatchObject({ code: '23514', constraint: 't_note_check' });
    expect((await queries.query(read, [11])).rows).toHaveLength(1);
  });

  it('rolls a transaction back around a failed prepared statement', async () => {
    await lite.query('begin');
    await queries.query(insert, [20, [], {}, null, true, 'inside']);
    await expect(queries.query(insert, [20, [], {}, null, true, 'twice'])).rejects.toMatchObject({ code: '23505' });
    await expect(queries.query(read, [20])).rejects.toMatchObject({ code: '25P02' });
    await lite.query('rollback');
    expect((await queries.query(read, [20])).rows).toEqual([]);
  });

  it('keeps no statement that failed to prepare: the text prepares once it can', async () => {
    const later = 'select count(*)::int as n from later where id > $1';
    for (let i = 0; i < 3; i++) await expect(queries.query(later, [0])).rejects.toMatchObject({ code: '42P01' });
    await lite.exec('create table later (id int); insert into later values (1), (2)');
    expect((await queries.query<{ n: number }>(later, [0])).rows).toEqual([{ n: 2 }]);
    expect((await queries.query<{ n: number }>(later, [1])).rows).toEqual([{ n: 1 }]);
    expect(await prepared()).toEqual(expect.arrayContaining([later]));
  });

  it('leaves statements without parameters, and several commands in one text, to PGlite', async () => {
    for (let i = 0; i < 3; i++) expect((await queries.query<{ one: number }>('select 1 as one')).rows).toEqual([{ one: 1 }]);
    expect(await prepared()).not.toContain('select 1 as one');
  });
});
