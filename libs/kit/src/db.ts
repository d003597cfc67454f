import { readdir, readFile } from 'node:fs/promises';
import type { Socket } from 'node:net';
import { join, resolve } from 'node:path';
import pg from 'pg';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import type { PgDatabase, PgDialect, PgQueryResultHKT, PgTransaction } from 'drizzle-orm/pg-core';
import { sql, type ExtractTablesWithRelations, type SQL } from 'drizzle-orm';
import { metrics, registerPool } from './metrics.js';
import { markNotCommitted, SharedTransactions } from './shared-tx.js';
import { SharedReads } from './shared-reads.js';
import { PLANNED_PER_CALL_TEXT, POINT_READ_TEXT, statementNaming } from './statement-names.js';
import { checkOut, coalesceWrites, socketOf } from './pg-connection.js';
import { dialectOf, pgliteClientForDrizzle, transactionOn } from './adapters/drizzle.js';
import { nameEveryQuery } from './adapters/pg.js';
import { EmbeddedEngine } from './embedded-engine.js';

/** The typed data layer (drizzle over node-postgres or PGlite: same schema, same SQL). */
export type Orm = PgDatabase<PgQueryResultHKT>;
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
   * Runs fn in one transaction. Inside it use only `tx`: on PGlite there is one
   * connection, so a statement on `db.orm` inside a transaction would wait forever.
   */
  tx<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
  /**
   * Like tx, but the transaction may be shared with other writes begun at the same
   * moment (group commit: shared-tx.ts). fn may run twice and must do nothing but
   * statements on `tx`. Embedded too: PGlite's one connection runs the group's
   * statements in turn, its BEGIN and COMMIT once for all.
   */
  sharedTx<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
  /** Rows of one statement. */
  rows<T>(q: SQL, exec?: Executor): Promise<T[]>;
  ping(): Promise<void>;
  close(): Promise<void>;
  /** internal: one raw transaction on one connection */
  rawTx<T>(fn: (raw: RawTx) => Promise<T>): Promise<T>;
}

/**
 * An array bound as one parameter: a bare array in drizzle's `sql` expands to a
 * list of parameters, so every batch size would be another statement text (never
 * a prepared statement) and `unnest` would not see an array.
 */
export const sqlArray = (xs: readonly unknown[]): SQL => sql`${sql.param(xs)}`;

/**
 * A timestamptz as ISO 8601 in UTC with all six fraction digits (`...T12:00:00.000100Z`):
 * exact, so a keyset position made from it names one record, and free of `+`,
 * so it goes into a URL's query as it is.
 */
export const utcMicros = (column: SQL): SQL => sql`to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

/**
 * Statements of a transaction that nothing after them waits for (the outbox rows, a
 * receipt): `pipelined()` hands them to the transaction, which sends its COMMIT
 * right behind them instead of after their answers, and fails if any of them failed.
 */
const tails = new WeakMap<Tx, { tail: Promise<PromiseSettledResult<unknown>>[]; socket?: Socket }>();
/**
 * Sends a statement on `tx` (`send` starts it) without waiting for its answer: on
 * PostgreSQL the COMMIT follows it on the wire (one round trip for the statement
 * and the commit); if it fails, the server has rolled the transaction back and
 * `db.tx` rejects with its error. Outside a transaction of `db.tx`, it is awaited
 * by nobody: do not use it there.
 */
export function pipelined(tx: Tx, send: () => PromiseLike<unknown>): void {
  const entry = tails.get(tx);
  if (!entry) throw new Error('pipelined() outside a transaction of db.tx');
  // held before the statement is sent, so that it leaves with the COMMIT behind it
  coalesceWrites(entry.socket);
  // sent now, in order: `then` on drizzle's lazy result is what sends it
  entry.tail.push(
    new Promise<PromiseSettledResult<unknown>>((settle) => {
      try {
        send().then(
          (value) => settle({ status: 'fulfilled', value }),
          (reason: unknown) => settle({ status: 'rejected', reason }),
        );
      } catch (reason) {
        settle({ status: 'rejected', reason });
      }
    }),
  );
}

/** The first failure among the statements handed to pipelined(), if any. */
async function tailFailure(tx: Tx): Promise<{ reason: unknown } | undefined> {
  const tail = tails.get(tx)?.tail;
  if (!tail?.length) return undefined;
  const failed = (await Promise.all(tail)).find((r) => r.status === 'rejected');
  return failed ? { reason: failed.reason } : undefined;
}

/** db.tx on PGlite (one connection, no pipelining): the handed-over statements are awaited before COMMIT. */
function embeddedTx<T>(orm: Orm, fn: (tx: Tx) => Promise<T>): Promise<T> {
  return orm.transaction(async (tx) => {
    tails.set(tx, { tail: [] });
    const out = await fn(tx);
    const failure = await tailFailure(tx);
    // thrown before the COMMIT: drizzle rolls back, so nothing of it is kept
    if (failure) throw markNotCommitted(failure.reason);
    return out;
  });
}

/**
 * Sends a statement at once and gives its one answer. drizzle's `execute()` gives
 * a lazy thenable that sends the statement anew on every `then`: awaited twice, it
 * would run twice, and not sent until awaited, it could not go ahead of an answer.
 */
function sendNow(tx: Tx, q: SQL): Promise<{ command?: string }> {
  return (tx.execute(q) as unknown as { execute(): Promise<{ command?: string }> }).execute();
}

/**
 * db.tx on PostgreSQL. Every round trip to the server costs both processes a
 * wake-up and a few system calls (measured here: about as much CPU as a short
 * statement's execution), so the client runs in pipeline mode and the
 * transaction sends BEGIN without waiting for it (the first statement follows on
 * the wire) and sends COMMIT right behind the statements handed to pipelined().
 * A keyed create is then two round trips instead of five: BEGIN with the insert,
 * and the outbox rows, the receipt and COMMIT. A statement that fails aborts the
 * transaction on the server, so a COMMIT behind it answers ROLLBACK and nothing is
 * kept; the statement's error is what db.tx rejects with.
 */
async function pipelinedTx<T>(pool: pg.Pool, dialect: PgDialect, fn: (tx: Tx) => Promise<T>): Promise<T> {
  const { client, release } = await checkOut(pool);
  const tx = transactionOn(dialect, client) as Tx;
  const socket = socketOf(client);
  tails.set(tx, { tail: [], socket });
  let broken = false;
  try {
    coalesceWrites(socket);
    const begun = sendNow(tx, sql`begin`);
    begun.catch(() => undefined); // reported below: a failure may come before anything awaits it
    // a failed BEGIN fails the statements behind it too; its own error is the one to report
    const out = await fn(tx).finally(() => begun);
    // the statements handed over were sent before the COMMIT, so their answers come first
    const [failure, done] = await Promise.all([tailFailure(tx), sendNow(tx, sql`commit`)]);
    if (failure) throw markNotCommitted(failure.reason);
    if (done.command !== 'COMMIT') throw markNotCommitted(new Error(`the transaction ended in ${done.command ?? 'nothing'} instead of COMMIT`));
    return out;
  } catch (err) {
    // after a failed COMMIT (or a connection lost) there may be no transaction to roll back:
    // PostgreSQL answers that with a warning, not an error
    await sendNow(tx, sql`rollback`).catch(() => {
      broken = true;
    });
    throw err;
  } finally {
    // a connection that could not even roll back is not given to the next caller
    release(broken);
  }
}

/**
 * Serialises the transactions that name the same key, to their ends (a
 * transaction-scoped advisory lock): for rules over rows that have no one row to
 * lock, such as "at most N per organisation" or "the tokens of one session".
 */
export async function lockKey(tx: Tx, key: string): Promise<void> {
  await tx.execute(sql`select pg_advisory_xact_lock(hashtext(${key}))`);
}

export async function rows<T>(exec: Executor, q: SQL): Promise<T[]> {
  // The executor's result type is drizzle's unresolved kind (unknown): the driver's { rows } is named here.
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-assertion
  const r = (await exec.execute(q)) as unknown as { rows: T[] };
  return r.rows;
}

export interface OpenDatabaseOptions {
  /** PostgreSQL URL (the server, or a pooler in front of it); unset means embedded PGlite in dataDir */
  url?: string;
  dataDir?: string;
  poolSize?: number;
  /** application_name on the server, for pg_stat_activity */
  name?: string;
  /**
   * Repeated statements as named (prepared) statements (DATABASE_PREPARED_STATEMENTS,
   * default true). False behind a transaction-mode pooler without protocol-level
   * prepared statements (PgBouncer before 1.21): a statement prepared on one server
   * connection is unknown on the next transaction's, so every statement goes
   * unnamed, parsed and planned on each call.
   */
  preparedStatements?: boolean;
}

export async function openDatabase(opts: OpenDatabaseOptions): Promise<Database> {
  return opts.url ? openPg(opts.url, opts.poolSize ?? 10, opts.name ?? 'lab', opts.preparedStatements ?? true) : openEmbedded(opts.dataDir ?? './data');
}

/**
 * Every connection's session in UTC: the JSON the database builds from rows
 * (row_to_json) writes timestamps in the session's time zone. Set with a SET on
 * each new connection rather than the startup packet's `options`, which a
 * pooler refuses (PgBouncer 1.18: "unsupported startup parameter") or, told to
 * ignore it, drops silently. TimeZone is one of the parameters PgBouncer tracks
 * per client: it reapplies the client's value to whichever server connection a
 * transaction gets, so the SET holds behind a transaction-mode pooler as well.
 */
const sessionInUtc = async (client: pg.ClientBase): Promise<void> => {
  await client.query(`set timezone to 'UTC'`);
};

function openPg(url: string, max: number, name: string, preparedStatements: boolean): Database {
  const pool = new pg.Pool({
    connectionString: url,
    max,
    application_name: name,
    // pg-pool waits for the hook's promise before it hands the connection out (and
    // drops the connection if it rejects); @types/pg types the hook as void
    // eslint-disable-next-line @typescript-eslint/no-misused-promises
    onConnect: sessionInUtc,
    // Fail fast while the server is away, so callers answer 503 instead of hanging.
    connectionTimeoutMillis: 5_000,
    idleTimeoutMillis: 30_000,
    // TCP keepalive on pooled connections: an idle one is not silently dropped by
    // a firewall or NAT's idle timeout on the way (a cloud network's conntrack),
    // and one whose server vanished is found dead by the kernel's probes instead
    // of by the next query's retransmissions
    keepAlive: true,
    keepAliveInitialDelayMillis: 30_000,
    // statements sent without waiting for the previous answer where a transaction
    // allows it (pipelinedTx); one statement at a time behaves as without it
    pipeline: true,
  });
  // An idle client losing its connection must not crash the process.
  pool.on('error', () => undefined);
  // waits for a connection are the first sign of a pool too small for its load
  const unregister = registerPool(name, {
    get waitingCount() {
      return pool.waitingCount;
    },
    get idleCount() {
      return pool.idleCount;
    },
    get totalCount() {
      return pool.totalCount;
    },
    max,
  });
  nameStatements(pool, preparedStatements);
  // statements outside transactions (drizzle's only use of its client is query)
  const reads = new SharedReads(pool);
  const orm = drizzlePg({ query: (config: unknown, values?: unknown) => reads.query(config, values) } as unknown as pg.Pool) as unknown as Orm;
  const dialect = dialectOf(orm);
  const tx = <T>(fn: (tx: Tx) => Promise<T>) => pipelinedTx(pool, dialect, fn);
  const shared = new SharedTransactions<Tx>(tx, countSharedTransaction);
  return {
    kind: 'pg',
    orm,
    tx,
    sharedTx: (fn) => shared.run(fn),
    rows: (q, exec = orm) => rows(exec, q),
    ping: async () => {
      await pool.query('select 1');
    },
    close: () => {
      unregister();
      return pool.end();
    },
    rawTx: async (fn) => {
      const { client, release } = await checkOut(pool);
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
        release();
      }
    },
  };
}

/**
 * Put first in a statement that must be planned on every call, never kept as a
 * named statement: those on tables whose size swings (the outbox, idempotency
 * records). PostgreSQL keeps a named statement's generic plan until the table's
 * statistics change, so a plan chosen while the table was nearly empty (a
 * sequential scan) would stay in use after it grew to thousands of rows or filled
 * with dead rows, for as long as no ANALYZE runs (forever with autovacuum off).
 */
export const PLANNED_PER_CALL = sql.raw(`${PLANNED_PER_CALL_TEXT} `);

/**
 * Put first in a query that reads a few rows by their key (a record by its id): such
 * a query may share a connection with the others begun in the same turn
 * (shared-reads.ts). Never on a query whose cost grows with the data (a page, a
 * count, a search): the point reads sharing its connection would wait behind it.
 */
export const POINT_READ = sql.raw(`${POINT_READ_TEXT} `);

/** lab_db_shared_transactions_total and lab_db_shared_transaction_writes_total, on both backends. */
function countSharedTransaction(size: number, outcome: 'committed' | 'rerun'): void {
  metrics().sharedTransactions.inc({ outcome });
  metrics().sharedTransactionWrites.inc({ outcome }, size);
}

/** Gives every query config of the pool's connections (what drizzle sends, inside transactions too) its statement name. */
function nameStatements(pool: pg.Pool, preparedStatements: boolean): void {
  nameEveryQuery(pool, statementNaming(preparedStatements));
}

/**
 * Embedded PostgreSQL. Every service of the standalone process shares one PGlite
 * instance per data directory (each in its own schema), as they would share one
 * server in a small cluster; it runs on a thread of its own (EmbeddedEngine).
 */
const embedded = new Map<string, { db: Promise<EmbeddedEngine>; refs: number }>();

async function openEmbedded(dataDir: string): Promise<Database> {
  const dir = resolve(dataDir, 'pg');
  let entry = embedded.get(dir);
  if (!entry) {
    entry = { refs: 0, db: EmbeddedEngine.start(dir) };
    embedded.set(dir, entry);
  }
  entry.refs++;
  const lite = await entry.db;
  const orm = drizzlePglite({ client: pgliteClientForDrizzle(lite) }) as unknown as Orm;
  const holder = entry;
  const tx = <T>(fn: (tx: Tx) => Promise<T>) => embeddedTx(orm, fn);
  // One connection, no round trips to save, but each statement costs PGlite a
  // fixed few hundred microseconds: a group's members share its BEGIN and COMMIT.
  const shared = new SharedTransactions<Tx>(tx, countSharedTransaction);
  return {
    kind: 'pglite',
    orm,
    tx,
    sharedTx: (fn) => shared.run(fn),
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
 * so that replicas starting together migrate exactly once. The lock is
 * transaction-scoped (a session lock would stay on whichever server connection a
 * transaction-mode pooler gave, after the pooler moved on) and every name is
 * schema-qualified (no search_path), so this runs through a pooler as well.
 *
 * With `direct.url` (DATABASE_DIRECT_URL: PostgreSQL itself when `db` goes
 * through a pooler) it runs on one connection of its own there, closed after:
 * DDL that waits for its lock or rewrites a table holds no pooled connection
 * and is not cut by the pooler's query and transaction timeouts.
 */
export async function migrate(db: Database, schema: string, dir: string, direct?: { url?: string; name?: string }): Promise<string[]> {
  if (direct?.url && db.kind === 'pg') {
    const own = openPg(direct.url, 1, direct.name ?? 'lab-migrate', false);
    try {
      return await migrate(own, schema, dir);
    } finally {
      await own.close();
    }
  }
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

/**
 * Tables every service schema has: the transactional outbox and its dead letters
 * (messages set aside, see outbox.ts), the consumer inbox, and the receipts of
 * keyed calls (see receipts.ts).
 */
function kitTables(schema: string): string {
  return `
    create table if not exists ${schema}.outbox (
      seq bigserial primary key,
      id uuid not null unique,
      type text not null,
      message jsonb not null,
      attempts integer not null default 0,
      next_attempt_at timestamptz not null default now(),
      created_at timestamptz not null default now(),
      traceparent text,
      tracestate text
    );
    -- the W3C trace context of the write (tracing.ts), added to outboxes created before it
    ${addColumnsIfMissing(schema, 'outbox', 'traceparent', 'add column traceparent text, add column tracestate text')}
    -- a row of several messages (Emitter.eventsJson): how many, its message their JSON array's text; null for one message
    ${addColumnsIfMissing(schema, 'outbox', 'messages', 'add column messages integer')}
    -- such a row is some hundred KB: lz4 compresses it in a tenth of pglz's time (asked only of a server built with it)
    do $$ begin
      if exists (select 1 from pg_settings where name = 'default_toast_compression' and 'lz4' = any(enumvals))
         and exists (select 1 from pg_attribute where attrelid = '${schema}.outbox'::regclass and attname = 'message' and attcompression <> 'l') then
        alter table ${schema}.outbox alter column message set compression lz4;
      end if;
    end $$;
    create index if not exists outbox_due_idx on ${schema}.outbox (next_attempt_at, seq);
    create table if not exists ${schema}.dead_letters (
      id uuid primary key,
      type text not null,
      message jsonb not null,
      queue text,
      error text not null,
      attempts integer not null,
      created_at timestamptz not null,
      parked_at timestamptz not null default now()
    );
    create index if not exists dead_letters_parked_idx on ${schema}.dead_letters (parked_at);
    create table if not exists ${schema}.inbox (
      id uuid primary key,
      received_at timestamptz not null default now()
    );
    create index if not exists inbox_received_idx on ${schema}.inbox (received_at);
    create table if not exists ${schema}.call_receipts (
      org_id uuid not null,
      token_id text not null,
      key text not null,
      answer text,
      created_at timestamptz not null default now(),
      request_hash text,
      primary key (org_id, token_id, key)
    );
    create index if not exists call_receipts_created_idx on ${schema}.call_receipts (created_at);
    -- the keyed request's hash (receipts.ts), added to receipts created before it
    ${addColumnsIfMissing(schema, 'call_receipts', 'request_hash', 'add column request_hash text')}`;
}

/**
 * Columns added to a kit table that older schemas lack. The catalog is asked
 * first: ALTER TABLE takes an exclusive lock on the table even when IF NOT
 * EXISTS finds the column, and every start of every replica runs this.
 */
function addColumnsIfMissing(schema: string, table: string, probe: string, changes: string): string {
  return `do $$ begin
      if not exists (select 1 from information_schema.columns
                     where table_schema = '${schema}' and table_name = '${table}' and column_name = '${probe}') then
        alter table ${schema}.${table} ${changes};
      end if;
    end $$;`;
}
