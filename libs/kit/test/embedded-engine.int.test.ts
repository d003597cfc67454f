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

/**
 * PGlite runs no autovacuum: the engine vacuums and analyzes the tables that grew
 * (decision 067). Without it, a prepared read by id planned while its table was
 * nearly empty kept scanning the organisation's rows for as long as the process ran.
 */
describe('embedded engine maintenance (autovacuum for PGlite)', () => {
  let dir: string;
  let engine: EmbeddedEngine;
  const org = '00000000-0000-4000-8000-000000000001';
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'lab-engine-maint-'));
    engine = await EmbeddedEngine.start(join(dir, 'pg'));
    await engine.exec(`create schema lab;
      create table lab.samples (id uuid primary key, org_id uuid not null, location uuid, name text);
      create index samples_org_location_idx on lab.samples (org_id, location);`);
  });
  afterAll(async () => {
    await engine.close();
    await rm(dir, { recursive: true, force: true });
  });

  const insert = (n: number) => engine.exec(`insert into lab.samples select gen_random_uuid(), '${org}', null, 'sample ' || i from generate_series(1, ${n}) i`);
  /** The plan a prepared statement runs with: its generic plan, kept as a service's named statements keep theirs. */
  const keptPlan = async () =>
    (await engine.query<{ 'QUERY PLAN': string }>(`explain execute read_by_id('${org}', '${org}')`)).rows.map((r) => r['QUERY PLAN']).join('\n');

  it("gathers the statistics of a table that grew, and the prepared read's plan is remade by its key", async () => {
    await insert(10);
    await engine.exec(`set plan_cache_mode = force_generic_plan;
      prepare read_by_id(uuid, uuid) as select name from lab.samples t where t.id = $1 and t.org_id = $2`);
    await engine.maintain();
    // planned on ten rows: a scan of the table, kept while it grows
    const small = await keptPlan();
    expect(small).not.toContain('samples_pkey');
    await insert(20_000);
    expect(await keptPlan()).toBe(small);

    expect(await engine.maintain()).toEqual(['lab.samples']);
    expect(await keptPlan()).toContain('Index Scan using samples_pkey');
    const { rows } = await engine.query<{ reltuples: number }>(`select reltuples from pg_class where oid = 'lab.samples'::regclass`);
    expect(rows[0]!.reltuples).toBeGreaterThan(19_000);
  });

  it('leaves a table alone until it grows again', async () => {
    await engine.maintain();
    expect(await engine.maintain()).toEqual([]);
    await insert(100);
    expect(await engine.maintain()).toEqual([]);
  });

  it('reclaims what deleted rows held: the table stops growing', async () => {
    await engine.exec(`create table lab.outbox (id bigserial primary key, payload text)`);
    const churn = async () => {
      await engine.exec(`insert into lab.outbox (payload) select repeat('x', 200) from generate_series(1, 5000)`);
      await engine.exec(`delete from lab.outbox`);
    };
    const pages = async () =>
      (await engine.query<{ n: number }>(`select pg_relation_size('lab.outbox')::int / current_setting('block_size')::int as n`)).rows[0]!.n;
    await churn();
    await engine.maintain();
    const after = await pages();
    for (let i = 0; i < 3; i++) {
      await churn();
      await engine.maintain();
    }
    // without VACUUM each round would add the 5,000 rows' pages again
    expect(await pages()).toBeLessThanOrEqual(after);
  });

  it('runs by itself every maintenanceEveryMs, and stops with the engine', async () => {
    let heard!: (tables: string[]) => void;
    const maintained = new Promise<string[]>((r) => (heard = r));
    const other = await EmbeddedEngine.start(join(dir, 'timed'), { maintenanceEveryMs: 20, onMaintained: (t) => heard(t) });
    try {
      await other.exec(`create table grows (id int primary key); insert into grows select generate_series(1, 1000)`);
      expect(await maintained).toEqual(['public.grows']);
    } finally {
      await other.close();
    }
  });
});
