import { sql } from 'drizzle-orm';
import type { Bus, BusMessage } from './bus.js';
import { PLANNED_PER_CALL, sqlArray, type Database, type Tx } from './db.js';
import { newId } from './ids.js';
import type { Logger } from './logger.js';
import { metrics } from './metrics.js';
import type { CallerContext } from './context.js';
import { currentRequestId } from './context.js';
import { CoalescedRunner } from './coalesced-runner.js';

/** What one audited write changed. */
export interface AuditEntry {
  action: 'create' | 'update' | 'delete' | string;
  resource: string;
  record_id: string | null;
  before?: Record<string, unknown> | null;
  after?: Record<string, unknown> | null;
}

/** The data of an `audit.record` message, as the audit service stores it. */
export interface AuditRecordData extends AuditEntry {
  actor_user_id: string | null;
  actor_token_id: string | null;
  token_kind: string;
  service: string;
  changed_fields: string[];
  request_id: string | null;
}

/** Collects the messages of one transaction; they are inserted before it commits. */
export class Emitter {
  readonly messages: BusMessage[] = [];
  constructor(
    private readonly service: string,
    private readonly caller: CallerContext | null,
  ) {}

  /** A domain or internal event. */
  event<T>(type: string, org_id: string | null, data: T): void {
    this.messages.push({
      id: newId(),
      type,
      org_id,
      occurred_at: new Date().toISOString(),
      request_id: this.caller?.request_id ?? currentRequestId(),
      data,
    });
  }

  /** The audit record of a write, on the same path as its events. */
  audit(org_id: string | null, entry: AuditEntry): void {
    const data: AuditRecordData = {
      ...entry,
      before: entry.before ?? null,
      after: entry.after ?? null,
      actor_user_id: this.caller?.user_id ?? null,
      actor_token_id: this.caller?.token_id ?? null,
      token_kind: this.caller?.token_kind ?? 'system',
      service: this.service,
      changed_fields: changedFields(entry.before ?? null, entry.after ?? null),
      request_id: this.caller?.request_id ?? currentRequestId() ?? null,
    };
    this.event('audit.record', org_id, data);
  }
}

export function changedFields(before: Record<string, unknown> | null, after: Record<string, unknown> | null): string[] {
  const keys = new Set([...Object.keys(before ?? {}), ...Object.keys(after ?? {})]);
  const out: string[] = [];
  for (const k of keys) {
    if (JSON.stringify(before?.[k] ?? null) !== JSON.stringify(after?.[k] ?? null)) out.push(k);
  }
  return out.sort();
}

export interface OutboxOptions {
  service: string;
  /** schema holding this service's outbox table */
  schema: string;
  db: Database;
  bus: Bus;
  log: Logger;
  /** fallback poll interval; commits kick the relay at once */
  pollMs?: number;
  batchSize?: number;
}

/**
 * Transactional outbox and its relay. `write()` runs a change and inserts its
 * messages in the same transaction; after commit the relay is kicked and
 * publishes them with confirms, deleting each batch only once the broker has
 * confirmed it. Rows are claimed with FOR UPDATE SKIP LOCKED, so replicas
 * share the work; a failed publish is retried with backoff.
 */
export class Outbox {
  private timer?: NodeJS.Timeout;
  private readonly table;
  private readonly relay: CoalescedRunner;

  constructor(private readonly opts: OutboxOptions) {
    this.table = sql.raw(`${opts.schema}.outbox`);
    // a full batch means there may be more: drain again at once
    this.relay = new CoalescedRunner(
      async () => (await this.drainOnce()) === (opts.batchSize ?? 500),
      (err) => opts.log.warn({ err }, 'outbox relay pass failed'),
    );
  }

  /** The schema of this service's tables. */
  get schema(): string {
    return this.opts.schema;
  }

  /** Runs fn in a transaction whose emitted messages commit with it. */
  async write<T>(caller: CallerContext | null, fn: (tx: Tx, emit: Emitter) => Promise<T>): Promise<T> {
    const emit = new Emitter(this.opts.service, caller);
    const out = await this.opts.db.tx(async (tx) => {
      const result = await fn(tx, emit);
      await this.insert(tx, emit.messages);
      return result;
    });
    if (emit.messages.length) this.kick();
    return out;
  }

  /** Inserts messages in the caller's transaction (for code that manages its own). */
  async insert(tx: Tx, messages: BusMessage[]): Promise<void> {
    if (!messages.length) return;
    const values = messages.map((m) => sql`(${m.id}::uuid, ${m.type}, ${JSON.stringify(m)}::jsonb)`);
    await tx.execute(sql`insert into ${this.table} (id, type, message) values ${sql.join(values, sql`, `)}`);
  }

  start(): void {
    this.relay.resume();
    const tick = () => {
      this.kick();
      this.timer = setTimeout(tick, this.opts.pollMs ?? 1_000);
      this.timer.unref();
    };
    tick();
  }

  /** Asks for a drain now; concurrent kicks coalesce into one more pass. */
  kick(): void {
    this.relay.kick();
  }

  /**
   * Publishes one batch; returns how many rows it took. Rows are claimed with a
   * lease by one statement and published outside any transaction, so no transaction is
   * held open across network I/O (and the in-process bus may write to the same
   * embedded database while it delivers). A process that dies mid-batch leaves
   * the rows to come due again when the lease ends: at least once, never lost.
   */
  async drainOnce(): Promise<number> {
    const { db, bus, service } = this.opts;
    const limit = this.opts.batchSize ?? 500;
    // One statement, so its own transaction: no BEGIN and COMMIT round trips.
    // The claimed rows are updated by their ctid (a TID scan): joined by id,
    // PostgreSQL scanned the whole table, dead rows of earlier batches included.
    const claimed = await db.rows<{ id: string; seq: string; message: string; attempts: number; age_s: number }>(
      sql`${PLANNED_PER_CALL}update ${this.table} set attempts = attempts + 1, next_attempt_at = now() + interval '30 seconds'
          where ctid = any(array(select ctid from ${this.table} where next_attempt_at <= now()
                                 order by seq limit ${limit} for update skip locked))
          returning id, seq::text as seq, message::text as message, attempts,
            (extract(epoch from (clock_timestamp() - created_at)))::float8 as age_s`,
    );
    metrics().outboxBacklog.set({ service }, claimed.length);
    if (!claimed.length) return 0;
    claimed.sort((a, b) => (BigInt(a.seq) < BigInt(b.seq) ? -1 : 1));
    const ids = claimed.map((r) => r.id);
    try {
      await bus.publish(claimed.map((r) => JSON.parse(r.message) as BusMessage));
    } catch (err) {
      metrics().outboxPublishFailures.inc({ service });
      const attempts = Math.max(...claimed.map((r) => r.attempts));
      const delayMs = Math.min(30_000, 250 * 2 ** Math.min(attempts, 7));
      await db.orm.execute(sql`${PLANNED_PER_CALL}update ${this.table}
          set next_attempt_at = now() + (${delayMs} * interval '1 millisecond') where id = any(${sqlArray(ids)}::uuid[])`);
      this.opts.log.warn({ err: (err as Error).message, count: claimed.length }, 'outbox publish failed, will retry');
      return 0;
    }
    await db.orm.execute(sql`${PLANNED_PER_CALL}delete from ${this.table} where id = any(${sqlArray(ids)}::uuid[])`);
    metrics().outboxPublished.inc({ service }, claimed.length);
    for (const r of claimed) metrics().outboxLag.observe({ service }, Number(r.age_s));
    return claimed.length;
  }

  /** Stops polling and publishes what is left (used on SIGTERM). */
  async stop(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    await this.relay.stop();
    try {
      while ((await this.drainOnce()) > 0) {
        /* flush */
      }
    } catch (err) {
      this.opts.log.warn({ err }, 'outbox flush on stop failed; rows stay for the next start');
    }
  }
}

