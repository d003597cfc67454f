import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import type { QueryOptions, Results, Transaction } from '@electric-sql/pglite';
import type { PgliteQueries } from './adapters/drizzle.js';
import { metrics } from './metrics.js';

/** A statement for the engine's thread (embedded-engine-thread.ts). */
export type EngineRequest =
  | { id: number; op: 'query'; text: string; params?: unknown[]; options?: QueryOptions }
  | { id: number; op: 'exec'; text: string }
  | { id: number; op: 'close' };

/** Its answer; id 0 is the thread's start (ready, or why not). */
export type EngineReply = { id: number; ok: true; value: unknown } | { id: number; ok: false; error: Record<string, unknown> };

/** The queries of one transaction of the engine (what PGlite's transaction callback is given). */
export type EngineTransaction = Pick<Transaction, 'query' | 'exec'>;

/**
 * The compiled thread module: beside this one in dist/, and there too when this
 * module runs from src/ (under the tests' TypeScript transform), since a worker
 * thread starts from JavaScript.
 */
const THREAD_MODULE = join(__dirname, '..', 'dist', 'embedded-engine-thread.js');

/**
 * How often the engine looks for tables to vacuum and analyze: autovacuum's
 * default naptime. PGlite runs no autovacuum (one process, one session).
 */
const MAINTENANCE_EVERY_MS = 60_000;

/**
 * The tables that grew by a tenth (and 8 pages) since their last VACUUM or ANALYZE,
 * or were never analyzed: by size on disk, which both backends know, where PGlite's
 * row counters (pg_stat_user_tables) stay at zero. A table that only churns (rows
 * written and deleted, as the outbox's) grows too, since without a VACUUM its freed
 * space is not found again. Quoted names, ready for VACUUM.
 */
const GROWN_TABLES = `select format('%I.%I', n.nspname, c.relname) as name
  from pg_class c join pg_namespace n on n.oid = c.relnamespace
  where c.relkind = 'r' and n.nspname not in ('pg_catalog', 'information_schema') and n.nspname not like 'pg\\_%'
    and pg_relation_size(c.oid) > 0
    and (c.reltuples < 0 or pg_relation_size(c.oid) / current_setting('block_size')::int > c.relpages * 1.1 + 8)
  order by c.oid`;

/** When the engine maintains its tables; `onMaintained` hears of each pass's tables (tests, logs). */
export interface EngineOptions {
  maintenanceEveryMs?: number;
  onMaintained?: (tables: string[]) => void;
}

/** An error of the engine's thread, with its fields (code, constraint, detail...) as PGlite gave them. */
function engineError(fields: Record<string, unknown>): Error {
  const { message, name, ...rest } = fields;
  const err = Object.assign(new Error(String(message)), rest);
  if (typeof name === 'string') err.name = name;
  return err;
}

/**
 * The embedded PostgreSQL (PGlite) on a thread of its own. PGlite runs each
 * statement synchronously on the thread that calls it (WebAssembly, and its files
 * through synchronous I/O): in the main thread it took about 60% of a keyed
 * create's time there, which HTTP, gRPC and the services then waited for. On its
 * own thread it runs on the second core while the main thread serves the next
 * requests (decision 065).
 *
 * The thread runs statements in the order they are sent, on PGlite's one session.
 * A transaction is BEGIN, its statements and COMMIT sent by this side, under a
 * lock: statements from outside it wait for its end, so nothing else runs inside
 * it; a transaction's own statements go at once, without waiting for the answer
 * of the one before (the thread queues them).
 */
export class EmbeddedEngine implements PgliteQueries {
  private readonly worker: Worker;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private nextId = 1;
  /** Why the thread can take no more statements (it failed or was closed). */
  private broken: Error | undefined;
  /** The end of the last transaction that holds or waits for the lock. */
  private lockTail: Promise<void> = Promise.resolve();
  private lockHeld = 0;
  private readonly ready: Promise<void>;
  private maintenanceTimer: NodeJS.Timeout | undefined;
  /** close() was called: no maintenance pass is scheduled again, even by one that was running. */
  private closing = false;

  private constructor(dir: string) {
    this.worker = new Worker(THREAD_MODULE, { workerData: { dir } });
    // a thread with nothing to answer keeps no process alive (as PGlite in the main thread did not)
    this.worker.unref();
    this.ready = new Promise((resolve, reject) => this.pending.set(0, { resolve: () => resolve(), reject }));
    this.worker.on('message', (m: EngineReply) => this.settle(m));
    this.worker.on('error', (err: Error) => this.fail(err));
    this.worker.on('exit', (code) => this.fail(new Error(`the embedded database's thread exited (code ${code})`)));
  }

  /** Starts the thread and opens (or creates) the database in `dir`. */
  static async start(dir: string, opts: EngineOptions = {}): Promise<EmbeddedEngine> {
    const engine = new EmbeddedEngine(dir);
    engine.worker.ref();
    try {
      await engine.ready;
    } catch (err) {
      // a thread that could not open the database does not stay behind holding its files
      await engine.worker.terminate();
      throw err;
    } finally {
      engine.worker.unref();
    }
    engine.scheduleMaintenance(opts.maintenanceEveryMs ?? MAINTENANCE_EVERY_MS, opts.onMaintained);
    return engine;
  }

  /**
   * Autovacuum's work, which PGlite does not do: VACUUM (ANALYZE) of each table that
   * grew since its last one (GROWN_TABLES), one at a time, each between
   * transactions. Without it the statistics would never change: a prepared
   * statement would keep the plan made when its table was nearly empty (a read by
   * id scanning the organisation's rows, decision 067) for as long as the process
   * runs, and the rows deleted by the relays and housekeeping would never be
   * reclaimed. Resolves with the tables maintained.
   */
  async maintain(): Promise<string[]> {
    const { rows } = await this.query<{ name: string }>(GROWN_TABLES);
    const done: string[] = [];
    for (const { name } of rows) {
      if (this.broken) break;
      await this.exec(`VACUUM (ANALYZE) ${name}`);
      metrics().embeddedMaintainedTables.inc();
      done.push(name);
    }
    return done;
  }

  /** A maintenance pass every `everyMs`, timed from the end of the last; none keeps the process alive. */
  private scheduleMaintenance(everyMs: number, onMaintained?: (tables: string[]) => void): void {
    this.maintenanceTimer = setTimeout(() => {
      this.maintain()
        .then(
          (tables) => {
            if (tables.length) onMaintained?.(tables);
          },
          // the next pass tries again; an engine closed under the pass schedules none
          () => {
            if (!this.closing && !this.broken) metrics().embeddedMaintenanceFailures.inc();
          },
        )
        .finally(() => {
          if (!this.closing && !this.broken) this.scheduleMaintenance(everyMs, onMaintained);
        });
    }, everyMs);
    this.maintenanceTimer.unref();
  }

  query<T>(text: string, params?: unknown[], options?: QueryOptions): Promise<Results<T>> {
    return this.outside(() => this.send<Results<T>>({ id: 0, op: 'query', text, params, options }));
  }

  exec(text: string): Promise<Results[]> {
    return this.outside(() => this.send<Results[]>({ id: 0, op: 'exec', text }));
  }

  /** fn's statements in one transaction: committed when fn resolves, rolled back when it throws. */
  async transaction<T>(fn: (tx: EngineTransaction) => Promise<T>): Promise<T> {
    const release = await this.lock();
    let open = true;
    const inside = <R>(req: EngineRequest): Promise<R> => {
      if (!open) return Promise.reject(new Error('Transaction is closed'));
      return this.send<R>(req);
    };
    const tx: EngineTransaction = {
      query: <R>(text: string, params?: unknown[], options?: QueryOptions) => inside<Results<R>>({ id: 0, op: 'query', text, params, options }),
      exec: (text: string) => inside<Results[]>({ id: 0, op: 'exec', text }),
    };
    try {
      const begun = this.send({ id: 0, op: 'query', text: 'BEGIN' });
      // a failed BEGIN fails fn's first statement too; its own error is the one to report
      const out = await fn(tx).finally(() => begun);
      open = false;
      await this.send({ id: 0, op: 'query', text: 'COMMIT' });
      return out;
    } catch (err) {
      open = false;
      // after a failed COMMIT PostgreSQL has already ended the transaction: ROLLBACK only warns
      await this.send({ id: 0, op: 'query', text: 'ROLLBACK' }).catch(() => undefined);
      throw err;
    } finally {
      release();
    }
  }

  async close(): Promise<void> {
    if (this.broken) return;
    this.closing = true;
    clearTimeout(this.maintenanceTimer);
    const release = await this.lock();
    try {
      await this.send({ id: 0, op: 'close' });
      this.broken = new Error('the embedded database is closed');
      await this.worker.terminate();
    } finally {
      release();
    }
  }

  /** A statement outside any transaction: sent now when no transaction holds or waits for the lock, else after them. */
  private async outside<R>(send: () => Promise<R>): Promise<R> {
    if (this.lockHeld === 0) return send();
    const release = await this.lock();
    // sent before the lock passes on: the thread runs it before the next BEGIN
    const answer = send();
    release();
    return answer;
  }

  private async lock(): Promise<() => void> {
    this.lockHeld++;
    let release!: () => void;
    const previous = this.lockTail;
    this.lockTail = new Promise<void>((r) => (release = r));
    await previous;
    return () => {
      this.lockHeld--;
      release();
    };
  }

  private send<R>(req: EngineRequest): Promise<R> {
    if (this.broken) return Promise.reject(this.broken);
    const id = this.nextId++;
    if (this.pending.size === 0) this.worker.ref();
    return new Promise<R>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.worker.postMessage({ ...req, id });
    });
  }

  private settle(m: EngineReply): void {
    const waiter = this.pending.get(m.id);
    if (!waiter) return;
    this.pending.delete(m.id);
    if (this.pending.size === 0) this.worker.unref();
    if (m.ok) waiter.resolve(m.value);
    else waiter.reject(engineError(m.error));
  }

  private fail(err: Error): void {
    this.broken ??= err;
    for (const waiter of this.pending.values()) waiter.reject(err);
    this.pending.clear();
  }
}
