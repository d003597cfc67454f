import { readdir, readFile, mkdir } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import pg from 'pg';
import { PGlite } from '@electric-sql/pglite';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { PgDialect, type PgDatabase, type PgQueryResultHKT, type PgTransaction } from 'drizzle-orm/pg-core';
import type { ExtractTablesWithRelations, SQL } from 'drizzle-orm';

/** The typed data layer (drizzle over node-postgres or PGlite: same schema, same SQL). */
export type Orm = PgDatabase<PgQueryResultHKT, Record<string, never>>;
export type Tx = PgTransaction<PgQueryResultHKT, Record<string, never>, ExtractTablesWithRelations<Record<string, never>>>;
/** Anything that runs a statement: the database or an open transaction. */
export type Executor = Orm | Tx;

/** A raw session on one connection, for migrations (multi-statement SQL files). */
interface RawTx {
  exec(text: string): Promise<void>;
  query<T>(text: string, params?: unknown[]): Promise<T[]>;
}

export interface Database {
  readonly kind: 'pg' | 'pglite';
  readonly orm: Orm;
  /**
   * Runs single statements outside any transaction, like `orm`, but as named
   * prepared statements on PostgreSQL: the server parses and plans each
   * statement shape once per connection instead of on every call. Only
   * `execute` (what `rows` uses) is offered; on PGlite it is `orm` itself.
   */
  readonly reads: Executor;
  /**
   * Runs fn in one transaction. Inside it use only `tx`: on PGlite there is one
   * connection, so a statement on `db.orm` inside a transaction would wait forever.
   */
  tx<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
  /** Rows of one statement. */
  rows<T>(q: SQL, exec?: Executor): Promise<T[]>;
  ping(): Promise<void>;
  close(): Promise<void>;
  /** internal: one raw transaction on one connection */
  rawTx<T>(fn: (raw: RawTx) => Promise<T>): Promise<T>;
}

export async function rows<T>(exec: Executor, q: SQL): Promise<T[]> {
  const r = (await exec.execute(q)) as unknown as { rows: T[] };
  return r.rows;
}

export interface OpenDatabaseOptions {
  /** PostgreSQL URL; unset means embedded PGlite in dataDir */
  url?: string;
  dataDir?: string;
  poolSize?: number;
  /** application_name on the server, for pg_stat_activity */
  name?: string;
}

export async function openDatabase(opts: OpenDatabaseOptions): Promise<Database> {
  return opts.url ? openPg(opts.url, opts.poolSize ?? 10, opts.name ?? 'lab') : openEmbedded(opts.dataDir ?? './data');
}

function openPg(url: string, max: number, name: string): Database {
  const pool = new pg.Pool({
    connectionString: url,
    max,
    application_name: name,
    // Fail fast while the server is away, so callers answer 503 instead of hanging.
    connectionTimeoutMillis: 5_000,
    idleTimeoutMillis: 30_000,
    options: '-c TimeZone=UTC',
  });
  // An idle client losing its connection must not crash the process.
  pool.on('error', () => undefined);
  const orm = drizzlePg(pool) as unknown as Orm;
  return {
    kind: 'pg',
    orm,
    reads: preparedReads(pool),
    tx: (fn) => orm.transaction(fn),
    rows: (q, exec = orm) => rows(exec, q),
    ping: async () => {
      await pool.query('select 1');
    },
    close: () => pool.end(),
    rawTx: async (fn) => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const out = await fn({
          exec: async (text) => {
            await client.query(text);
          },
          query: async <T>(text: string, params?: unknown[]) => (await client.query(text, params)).rows as T[],
        });
        await client.query('COMMIT');
        return out;
      } catch (err) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw err;
      } finally {
        client.release();
      }
    },
  };
}

/** Dates and times stay the strings PostgreSQL sent, as drizzle's own driver keeps them. */
const TEXT_TYPES = new Set([
  pg.types.builtins.TIMESTAMPTZ,
  pg.types.builtins.TIMESTAMP,
  pg.types.builtins.DATE,
  pg.types.builtins.INTERVAL,
  1115, // timestamp[]
  1182, // date[]
  1185, // timestamptz[]
  1187, // interval[]
  1231, // numeric[]
]);
const driverTypes = {
  getTypeParser: (oid: number, format?: 'text' | 'binary') =>
    TEXT_TYPES.has(oid) ? (v: string) => v : pg.types.getTypeParser(oid, format),
};

/**
 * Named statements live on each server connection; their number is bounded so
 * that an unbounded variety of statement texts cannot grow server memory: past
 * the bound, new texts run unnamed (parsed every time), as before.
 */
const MAX_PREPARED = 512;

function preparedReads(pool: pg.Pool): Executor {
  const dialect = new PgDialect();
  const names = new Map<string, string>();
  const execute = async (q: SQL) => {
    const { sql: text, params } = dialect.sqlToQuery(q);
    let name = names.get(text);
    if (name === undefined && names.size < MAX_PREPARED) {
      name = `lab_${names.size}`;
      names.set(text, name);
    }
    // pg types the config loosely; `types` takes a getTypeParser like the pool's own
    return pool.query({ name, text, values: params, types: driverTypes } as pg.QueryConfig);
  };
  return { execute } as unknown as Executor;
}

/**
 * Embedded PostgreSQL. Every service of the standalone process shares one PGlite
 * instance per data directory (each in its own schema), as they would share one
 * server in a small cluster.
 */
const embedded = new Map<string, { db: Promise<PGlite>; refs: number }>();

async function openEmbedded(dataDir: string): Promise<Database> {
  const dir = resolve(dataDir, 'pg');
  let entry = embedded.get(dir);
  if (!entry) {
    entry = {
      refs: 0,
      db: (async () => {
        await mkdir(dir, { recursive: true });
        const lite = await PGlite.create(dir);
        await lite.exec(`SET TimeZone = 'UTC'`);
        return lite;
      })(),
    };
    embedded.set(dir, entry);
  }
  entry.refs++;
  const lite = await entry.db;
  const orm = drizzlePglite(lite) as unknown as Orm;
  const holder = entry;
  return {
    kind: 'pglite',
    orm,
    reads: orm,
    tx: (fn) => orm.transaction(fn),
    rows: (q, exec = orm) => rows(exec, q),
    ping: async () => {
      await lite.query('select 1');
    },
    close: async () => {
      if (--holder.refs === 0) {
        embedded.delete(dir);
        await lite.close();
      }
    },
    rawTx: (fn) =>
      lite.transaction((t) =>
        fn({
          exec: async (text) => {
            await t.exec(text);
          },
          query: async <T>(text: string, params?: unknown[]) => (await t.query<T>(text, params)).rows,
        }),
      ),
  };
}

/**
 * Applies the service's SQL migrations (files `NNN_name.sql`, in name order) that
 * have not run yet, all in one transaction under an advisory lock on the schema,
 * so that replicas starting together migrate exactly once.
 */
export async function migrate(db: Database, schema: string, dir: string): Promise<string[]> {
  if (!/^[a-z_][a-z0-9_]*$/.test(schema)) throw new Error(`bad schema name ${schema}`);
  const files = (await readdir(dir)).filter((f) => f.endsWith('.sql')).sort();
  return db.rawTx(async (raw) => {
    await raw.query('select pg_advisory_xact_lock(hashtext($1))', [`lab.migrate.${schema}`]);
    await raw.exec(`create schema if not exists ${schema};
      create table if not exists ${schema}.schema_migrations (name text primary key, applied_at timestamptz not null default now());
      ${kitTables(schema)}`);
    const done = new Set((await raw.query<{ name: string }>(`select name from ${schema}.schema_migrations`)).map((r) => r.name));
    const applied: string[] = [];
    for (const file of files) {
      if (done.has(file)) continue;
      await raw.exec(await readFile(join(dir, file), 'utf8'));
      await raw.query(`insert into ${schema}.schema_migrations (name) values ($1)`, [file]);
      applied.push(file);
    }
    return applied;
  });
}

/** Tables every service schema has: the transactional outbox and the consumer inbox. */
function kitTables(schema: string): string {
  return `
    create table if not exists ${schema}.outbox (
      seq bigserial primary key,
      id uuid not null unique,
      type text not null,
      message jsonb not null,
      attempts integer not null default 0,
      next_attempt_at timestamptz not null default now(),
      created_at timestamptz not null default now()
    );
    create index if not exists outbox_due_idx on ${schema}.outbox (next_attempt_at, seq);
    create table if not exists ${schema}.inbox (
      id uuid primary key,
      received_at timestamptz not null default now()
    );
    create index if not exists inbox_received_idx on ${schema}.inbox (received_at);`;
}
