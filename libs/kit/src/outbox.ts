import { sql } from 'drizzle-orm';
import type { Bus, BusMessage } from './bus.js';
import { pipelined, PLANNED_PER_CALL, rows, sqlArray, type Database, type Tx } from './db.js';
import { newId } from './ids.js';
import { errText, type Logger } from './logger.js';
import { metrics } from './metrics.js';
import type { CallerContext } from './context.js';
import { currentRequestId } from './context.js';
import { CoalescedRunner } from './coalesced-runner.js';
import type { Receipts } from './receipts.js';
import { withTimeout } from './waits.js';

/** What one audited write changed. */
export interface AuditEntry {
  action: 'create' | 'update' | 'delete' | string;
  resource: string;
  record_id: string | null;
  before?: Record<string, unknown> | null;
  after?: Record<string, unknown> | null;
  /** why the change was made, where the write asks for it (an amendment) */
  reason?: string | null;
  /** what a signature means (authorship, review, approval) */
  meaning?: string | null;
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
    const before = redactSecrets(entry.before ?? null);
    const after = redactSecrets(entry.after ?? null);
    const data: AuditRecordData = {
      ...entry,
      before,
      after,
      reason: entry.reason ?? null,
      meaning: entry.meaning ?? null,
      actor_user_id: this.caller?.user_id ?? null,
      actor_token_id: this.caller?.token_id ?? null,
      token_kind: this.caller?.token_kind ?? 'system',
      service: this.service,
      // from the unredacted values: a rotated secret shows as changed, never its value
      changed_fields: changedFields(entry.before ?? null, entry.after ?? null),
      request_id: this.caller?.request_id ?? currentRequestId() ?? null,
    };
    this.event('audit.record', org_id, data);
  }
}

/**
 * Field names whose text values are credentials: passwords, secrets, tokens and
 * their hashes (password_hash, signing_secret, client_secret_hash, token_hash,
 * refresh_token...). The audit log is read with a scope of its own and exported
 * whole; a credential in it, even hashed, would outlive its rotation there.
 */
const SECRET_FIELD = /(^|_)(password|secret|token)(_hash)?$/i;
export const REDACTED = '[redacted]';

/**
 * A copy of an audited value with every credential field's text replaced by
 * REDACTED, at any depth (flags such as has_password are not text and stay).
 * Services leave credentials out of what they audit already; this is the rule
 * that holds when one forgets.
 */
export function redactSecrets<T>(value: T): T {
  if (Array.isArray(value)) return value.map((v) => redactSecrets(v)) as T;
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    out[k] = typeof v === 'string' && SECRET_FIELD.test(k) ? REDACTED : redactSecrets(v);
  }
  return out as T;
}

export function changedFields(before: Record<string, unknown> | null, after: Record<string, unknown> | null): string[] {
  const keys = new Set([...Object.keys(before ?? {}), ...Object.keys(after ?? {})]);
  const out: string[] = [];
  for (const k of keys) {
    if (JSON.stringify(before?.[k] ?? null) !== JSON.stringify(after?.[k] ?? null)) out.push(k);
  }
  return out.sort();
}

/**
 * The answer of a method that answers a record as JSON text (lab.*.JsonResponse,
 * RecordResponse): given to Outbox.write as `answer` and returned by the handler,
 * so the receipt keeps exactly what the call answered.
 */
export const jsonAnswer = (json: string): { json: string } => ({ json });

interface ClaimedRow {
  id: string;
  seq: string;
  message: string;
  attempts: number;
  age_s: number;
}

/** How long a claimed row has waited since its transaction wrote it. */
const AGE_S = sql.raw('(extract(epoch from (clock_timestamp() - created_at)))::float8 as age_s');

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
  /** how long the relay waits for a broker's confirmation while it holds the batch's row locks */
  publishTimeoutMs?: number;
  /** receipts of keyed calls, claimed by their first write (a service's; unset in tools and tests) */
  receipts?: Receipts;
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

  /**
   * Runs fn in a transaction whose emitted messages commit with it. The first
   * write of a keyed call also claims the call's receipt in it: first thing, so
   * that a retry of a call that already wrote waits for it and then fails before
   * doing anything; or, when `answer` gives the call's answer from fn's result
   * (the generic records engine), last, with that answer, so that the answer
   * commits with the write.
   */
  async write<T>(caller: CallerContext | null, fn: (tx: Tx, emit: Emitter) => Promise<T>, answer?: (result: T) => unknown): Promise<T> {
    const emit = new Emitter(this.opts.service, caller);
    const receipts = this.opts.receipts;
    const claim = receipts?.beginClaim();
    let answered = false;
    let out: T;
    try {
      out = await this.opts.db.tx(async (tx) => {
        if (claim && !answer) await receipts!.claim(tx, claim);
        const result = await fn(tx, emit);
        // nothing waits for these answers: they travel with the COMMIT (a failure
        // rolls the transaction back and is what the write rejects with)
        if (emit.messages.length) pipelined(tx, () => this.insert(tx, emit.messages));
        if (claim && answer) {
          const given = answer(result);
          answered = given !== undefined;
          pipelined(tx, () => receipts!.claim(tx, claim, given));
        }
        return result;
      });
    } catch (err) {
      if (claim) receipts!.settleClaim('rolled back');
      throw err;
    }
    // without an answer from the write, the gRPC server keeps the handler's
    if (claim) receipts!.settleClaim(answered ? 'answered' : 'claimed');
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
   * Publishes one batch; returns how many rows it took. A broker in another
   * process gets the batch under row locks, an in-process bus (or the embedded
   * database's one connection) under a lease.
   */
  async drainOnce(): Promise<number> {
    const { db, bus } = this.opts;
    const taken = bus.deliversInProcess || db.kind === 'pglite' ? await this.drainLeased() : await this.drainLocked();
    metrics().outboxBacklog.set({ service: this.opts.service }, taken);
    return taken;
  }

  /**
   * Rows are locked FOR UPDATE SKIP LOCKED (replicas share the work) by a
   * transaction that publishes them and deletes them once the broker has
   * confirmed. Nothing is written to claim them: the lease UPDATE this replaces
   * wrote a new version of every row, a seventh of a keyed write's WAL. A relay
   * that dies mid-batch releases its rows at once with its connection, and a
   * publish is bounded in time, so a broker that stops answering cannot hold
   * the locks.
   */
  private async drainLocked(): Promise<number> {
    return this.opts.db.tx(async (tx) => {
      const claimed = await rows<ClaimedRow>(
        tx,
        // ordered by the column t.seq (a bare `seq` would be the text alias): the
        // primary key's index scan, which skips deleted rows' entries once seen
        sql`${PLANNED_PER_CALL}select id, seq::text as seq, message::text as message, attempts, ${AGE_S}
            from ${this.table} t where next_attempt_at <= now()
            order by t.seq limit ${this.opts.batchSize ?? 500} for update skip locked`,
      );
      if (!claimed.length) return 0;
      const ids = sqlArray(claimed.map((r) => r.id));
      try {
        await this.publishInTime(this.publish(claimed));
      } catch (err) {
        // the backoff commits with the transaction; the rows stay for a later pass
        pipelined(tx, () =>
          tx.execute(sql`${PLANNED_PER_CALL}update ${this.table}
            set attempts = attempts + 1, next_attempt_at = now() + (${this.backoffMs(claimed, 1)} * interval '1 millisecond')
            where id = any(${ids}::uuid[])`),
        );
        this.publishFailed(err, claimed.length);
        return 0;
      }
      // confirmed: the rows go with the COMMIT, sent right behind the DELETE
      pipelined(tx, () => tx.execute(sql`${PLANNED_PER_CALL}delete from ${this.table} where id = any(${ids}::uuid[])`));
      this.published(claimed);
      return claimed.length;
    });
  }

  /**
   * Rows are claimed with a lease by one statement and published outside any
   * transaction: the in-process bus writes to the same (possibly embedded, one
   * connection) database while it delivers. A process that dies mid-batch
   * leaves the rows to come due again when the lease ends: at least once,
   * never lost.
   */
  private async drainLeased(): Promise<number> {
    const { db } = this.opts;
    // One statement, so its own transaction: no BEGIN and COMMIT round trips.
    // The claimed rows are updated by their ctid (a TID scan): joined by id,
    // PostgreSQL scanned the whole table, dead rows of earlier batches included.
    const claimed = await db.rows<ClaimedRow>(
      sql`${PLANNED_PER_CALL}update ${this.table} set attempts = attempts + 1, next_attempt_at = now() + interval '30 seconds'
          where ctid = any(array(select ctid from ${this.table} where next_attempt_at <= now()
                                 order by seq limit ${this.opts.batchSize ?? 500} for update skip locked))
          returning id, seq::text as seq, message::text as message, attempts, ${AGE_S}`,
    );
    if (!claimed.length) return 0;
    claimed.sort((a, b) => (BigInt(a.seq) < BigInt(b.seq) ? -1 : 1));
    const ids = sqlArray(claimed.map((r) => r.id));
    try {
      // A broker in another process (embedded database with RabbitMQ) is given the
      // same time limit as under row locks: one that stops confirming (a memory or
      // disk alarm) must not stall the relay and a graceful stop behind it. The
      // in-process bus resolves once its consumers are done, which takes as long
      // as they take.
      const publishing = this.publish(claimed);
      await (this.opts.bus.deliversInProcess ? publishing : this.publishInTime(publishing));
    } catch (err) {
      await db.orm.execute(sql`${PLANNED_PER_CALL}update ${this.table}
          set next_attempt_at = now() + (${this.backoffMs(claimed, 0)} * interval '1 millisecond') where id = any(${ids}::uuid[])`);
      this.publishFailed(err, claimed.length);
      return 0;
    }
    await db.orm.execute(sql`${PLANNED_PER_CALL}delete from ${this.table} where id = any(${ids}::uuid[])`);
    this.published(claimed);
    return claimed.length;
  }

  private publishInTime(publishing: Promise<void>): Promise<void> {
    const ms = this.opts.publishTimeoutMs ?? 10_000;
    return withTimeout(publishing, ms, `no confirmation within ${ms} ms`);
  }

  private publish(claimed: ClaimedRow[]): Promise<void> {
    return this.opts.bus.publish(claimed.map((r) => JSON.parse(r.message) as BusMessage));
  }

  /** Exponential backoff from the batch's most tried row (`pending` attempts not yet counted). */
  private backoffMs(claimed: ClaimedRow[], pending: number): number {
    const attempts = Math.max(...claimed.map((r) => r.attempts)) + pending;
    return Math.min(30_000, 250 * 2 ** Math.min(attempts, 7));
  }

  private publishFailed(err: unknown, count: number): void {
    metrics().outboxPublishFailures.inc({ service: this.opts.service });
    this.opts.log.warn({ err: errText(err), count }, 'outbox publish failed, will retry');
  }

  private published(claimed: ClaimedRow[]): void {
    const { service } = this.opts;
    metrics().outboxPublished.inc({ service }, claimed.length);
    for (const r of claimed) metrics().outboxLag.observe({ service }, Number(r.age_s));
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

