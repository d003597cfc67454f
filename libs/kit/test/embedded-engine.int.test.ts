import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EmbeddedEngine } from '../src/embedded-engine';

/**
 * The embedded PostgreSQL on its own thread (decision 065): what the main thread
 * relies on when PGlite no longer runs on it.
 */
describe('embedded engine (PGlite on its own thread)', () => {
  let dir: string;
  let engine: EmbeddedEngine;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'lab-engine-'));
    engine = await EmbeddedEngine.start(join(dir, 'pg'));
    await engine.exec(`create table t (id int primary key, note text check (note <> 'bad'))`);
  });
  afterAll(async () => {
    await engine.close();
    await rm(dir, { recursive: true, force: true });
  });
  beforeEach(() => engine.query('delete from t'));

  it('answers statements with the rows and values PGlite gives', async () => {
    const r = await engine.query<{ n: number; doc: unknown; big: number; at: string }>(
      `select 1 as n, '{"a": [1, 2]}'::jsonb as doc, 42::int8 as big, '2026-01-02 03:04:05+00'::timestamptz as at`,
    );
    expect(r.rows).toEqual([{ n: 1, doc: { a: [1, 2] }, big: 42, at: '2026-01-02 03:04:05+00' }]);
  });

  it('keeps statements from outside a transaction out of it until it ends', async () => {
    let inside!: () => void;
    const holding = new Promise<void>((r) => (inside = r));
    let letGo!: () => void;
    const released = new Promise<void>((r) => (letGo = r));
    const tx = engine.transaction(async (t) => {
      await t.query('insert into t values (1, $1)', ['uncommitted']);
      inside();
      await released;
      throw new Error('rolled back');
    });
    await holding;
    // sent while the transaction is open: run inside it, it would count the
    // uncommitted row; it runs after the ROLLBACK and finds none
    const outside = engine.query<{ n: number }>('select count(*)::int as n from t');
    letGo();
    await expect(tx).rejects.toThrow('rolled back');
    expect((await outside).rows).toEqual([{ n: 0 }]);
  });

  it("runs a transaction's statements in the order sent, without waiting for each answer", async () => {
    const ids = await engine.transaction(async (t) => {
      const sent = [1, 2, 3].map((id) => t.query<{ id: number }>('insert into t values ($1, null) returning id', [id]));
      return (await Promise.all(sent)).map((r) => r.rows[0]!.id);
    });
    expect(ids).toEqual([1, 2, 3]);
  });

  it('rolls back what a failed transaction wrote, and gives PostgreSQL error fields across the thread', async () => {
    const failed = engine.transaction(async (t) => {
      await t.query('insert into t values (1, null)');
      await t.query('insert into t values (1, null)');
    });
    await expect(failed).rejects.toMatchObject({ code: '23505', constraint: 't_pkey', table: 't' });
    await expect(engine.query("insert into t values (2, 'bad')")).rejects.toMatchObject({ code: '23514', constraint: 't_note_check' });
    expect((await engine.query('select * from t')).rows).toEqual([]);
    // the session is usable again after both
    expect((await engine.query<{ n: number }>('select 1 as n')).rows).toEqual([{ n: 1 }]);
  });

  it('refuses statements of a transaction that has ended', async () => {
    let kept!: { query: (text: string) => Promise<unknown> };
    await engine.transaction(async (t) => {
      kept = t;
    });
    await expect(kept.query('select 1')).rejects.toThrow(/closed/);
  });

  it('rejects the start when the database cannot be opened, with why', async () => {
    await writeFile(join(dir, 'a-file'), 'not a directory');
    await expect(EmbeddedEngine.start(join(dir, 'a-file', 'pg'))).rejects.toMatchObject({ code: 'ENOTDIR' });
  });

  it('refuses statements once closed; the data stays in the directory for the next start', async () => {
    const own = await EmbeddedEngine.start(join(dir, 'second'));
    await own.exec('create table kept (n int); insert into kept values (7)');
    await own.close();
    await expect(own.query('select 1')).rejects.toThrow(/closed/);
    const again = await EmbeddedEngine.start(join(dir, 'second'));
    try {
      expect((await again.query('select n from kept')).rows).toEqual([{ n: 7 }]);
    } finally {
      await again.close();
    }
  });
});
