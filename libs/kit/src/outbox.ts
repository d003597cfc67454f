import { sql, type SQL } from 'drizzle-orm';
import type { Bus, BusMessage, PublishOutcome, Refusal } from './bus.js';
import { pipelined, PLANNED_PER_CALL, rows, sqlArray, utcMicros, type Database, type Tx } from './db.js';
import { newId } from './ids.js';
import { errText, type Logger } from './logger.js';
import { metrics, registerOutboxCounts } from './metrics.js';
import { OutageLog } from './outage-log.js';
import type { CallerContext } from './context.js';
import { currentRequestId } from './context.js';
import { CoalescedRunner } from './coalesced-runner.js';
import type { Receipts } from './receipts.js';
import { withTimeout } from './waits.js';
import { activeTraceCarrier, failSpan, SpanKind, startDetachedSpan, tracingOn, type TraceCarrier } from './tracing.js';

/** What one audited write changed. */
export interface AuditEntry {
  /** 'create', 'update' or 'delete' for a record; other writes name their own */
  action: string;
  resource: string;
  record_id: string | null;
  before?: Record<string, unknown> | null;
  after?: Record<string, unknown> | null;
  /** why the change was made, where the write asks for it */
  reason?: string | null;
  /** what an attestation of the record means, where the write is one (the owning service names the meanings) */
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

/**
 * The most messages, and characters of their JSON, one outbox row of
 * Emitter.eventsJson holds: a relay pass (DEFAULT_BATCH messages) takes at least
 * one row, so a row is never more than a default pass publishes, and never more
 * than a bundle the bus sends whole (kit's bus closes its own at 1 MiB).
 */
const ROW_MESSAGES = 500;
const ROW_CHARS = 512 * 1024;

/** Messages of one type stored as one outbox row (Emitter.eventsJson). */
export interface MessageSet {
  /** the outbox row's id */
  id: string;
  type: string;
  /** the messages as a JSON array, as they are published */
  json: string;
  count: number;
}

/** Collects the messages of one transaction; they are inserted before it commits. */
export class Emitter {
  readonly messages: BusMessage[] = [];
  /** messages of eventsJson, a row each */
  readonly sets: MessageSet[] = [];
  constructor(
    private readonly service: string,
    private readonly caller: CallerContext | null,
  ) {}

  /** A domain or internal event. */
  event(type: string, org_id: string | null, data: unknown): void {
    this.messages.push({
      id: newId(),
      type,
      org_id,
      occurred_at: new Date().toISOString(),
      request_id: this.caller?.request_id ?? currentRequestId(),
      data,
    });
  }

  /**
   * Events of `type`, one per element of `data` (each the JSON text of an event's
   * data), for a write that makes many at once (an ingest batch's breaches). Each
   * message is what event() makes (its own id, type, org_id, this call's time as
   * occurred_at, the request id, data), written as JSON text here with no object
   * per event; they are stored up to ROW_MESSAGES (and ROW_CHARS) to an outbox row
   * rather than a row each, and published message by message: a broker that
   * bundles the type gets the row's JSON array as one bundle, as it is.
   */
  eventsJson(type: string, org_id: string | null, data: readonly string[]): void {
    if (!data.length) return;
    // a UUIDv7 prefix (24 hex digits: the time, rand_a and 30 random bits); each
    // message's id is it and the message's number in 8 hex digits
    const idBase = newId().slice(0, 28);
    const requestId = this.caller?.request_id ?? currentRequestId();
    // JSON.stringify of event()'s message, around its id and its data
    const tail =
      `","type":${JSON.stringify(type)},"org_id":${JSON.stringify(org_id)},"occurred_at":"${new Date().toISOString()}"` +
      `${requestId === undefined ? '' : `,"request_id":${JSON.stringify(requestId)}`},"data":`;
    let json = '';
    let count = 0;
    for (let k = 0; k < data.length; k++) {
      const m = `{"id":"${idBase}${k.toString(16).padStart(8, '0')}${tail}${data[k]!}}`;
      if (count && (count === ROW_MESSAGES || json.length + m.length > ROW_CHARS)) {
        this.sets.push({ id: newId(), type, json: `[${json}]`, count });
        json = '';
        count = 0;
      }
      json += (count ? ',' : '') + m;
      count++;
    }
    this.sets.push({ id: newId(), type, json: `[${json}]`, count });
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
  if (Array.isArray(value)) return (value as unknown[]).map((v) => redactSecrets(v)) as T;
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

/** A claimed outbox row: one message, or several (Emitter.eventsJson). */
interface ClaimedRow {
  id: string;
  seq: string;
  type: string;
  request_id: string | null;
  /** the message's JSON, or (`messages` set) the JSON array of the row's messages */
  message: string;
  /** how many messages a row of several holds; null for one */
  messages: number | null;
  /** whether more rows were due than this pass took (it was full) */
  more: boolean;
  attempts: number;
  age_s: number;
  /** the trace context of the write (selected only when tracing is on) */
  traceparent?: string | null;
  tracestate?: string | null;
}

/** Messages of a claimed row, and of claimed rows. */
const countOf = (r: ClaimedRow): number => r.messages ?? 1;
const messagesIn = (rows: readonly ClaimedRow[]): number => rows.reduce((n, r) => n + countOf(r), 0);

/** The messages of a claimed row, read (for a bus that takes objects). */
const messagesOfRow = (r: ClaimedRow): BusMessage[] => (r.messages === null ? [JSON.parse(r.message) as BusMessage] : (JSON.parse(r.message) as BusMessage[]));

/** The trace columns of a claimed row, read only when this process traces. */
const TRACE_COLUMNS = sql.raw(', traceparent, tracestate');
const traceColumns = () => (tracingOn() ? TRACE_COLUMNS : sql``);

/** What every pass reads of the rows it takes (`t`), after a `fit` clause (Outbox.dueRows). */
const claimedColumns = () => sql`${CLAIMED}, ${AGE_S}${traceColumns()}, (select more from fit) as more`;

/** How long a claimed row has waited since its transaction wrote it. */
const AGE_S = sql.raw('(extract(epoch from (clock_timestamp() - created_at)))::float8 as age_s');

/** A row the relay may take: due, or a row of several messages (due at 'infinity' only to relays that predate them). */
const DUE = sql.raw(`(t.next_attempt_at <= now() or t.next_attempt_at = 'infinity')`);

/** The columns of a claimed row `t`: a row of several's JSON array is read back as the text stored (insertSets). */
const CLAIMED = sql.raw(`t.id, t.seq::text as seq, t.type, t.message->>'request_id' as request_id,
  case when t.messages is null then t.message::text else t.message #>> '{}' end as message, t.messages, t.attempts`);

/**
 * Refusals of one message by a broker (negative confirms) after which the relay
 * sets it aside in the dead-letter table instead of trying it again: the rest of
 * the outbox goes on either way, this only stops one message cycling forever.
 */
export const MAX_BROKER_REFUSALS = 8;

/** Default of `stopFlushMs`: well inside the chart's 30-second termination grace period. */
export const DEFAULT_STOP_FLUSH_MS = 5_000;

const DEFAULT_BATCH = 500;
/**
 * On the embedded database, relay passes asked for back to back start at most
 * this often (CoalescedRunner): every statement there runs on the thread that
 * serves the requests, and a pass costs about six of them (claim, the in-process
 * consumers' writes, the delete) whether it moves five rows or a hundred. Under a
 * burst of writes, events then leave in batches a little later (decision 063); a
 * write after a quiet moment is relayed at once.
 */
const EMBEDDED_PASS_SPACING_MS = 50;
/** Batches in flight at once on the locked path (see OutboxOptions.concurrency; bench/outbox-drain.mjs). */
const DEFAULT_CONCURRENCY = 3;

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
  /**
   * Batches published at once, each claimed by its own transaction (SKIP LOCKED
   * keeps them apart), when rows are locked while published (PostgreSQL and a
   * broker in another process): a batch's confirms and DELETE round trips overlap
   * the next one's. The in-process bus and the embedded database take one batch
   * at a time.
   */
  concurrency?: number;
  /** how long the relay waits for a broker's confirmation while it holds the batch's row locks */
  publishTimeoutMs?: number;
  /**
   * How long stop() keeps publishing the backlog (default DEFAULT_STOP_FLUSH_MS);
   * what is left then stays in the outbox for the next start.
   */
  stopFlushMs?: number;
  /** receipts of keyed calls, claimed by their first write (a service's; unset in tools and tests) */
  receipts?: Receipts;
}

/** A message set aside: a consumer gave up on it, or the broker kept refusing it. */
export interface DeadLetter {
  id: string;
  type: string;
  /** the consumer(s) that gave up on it; null when the broker refused it */
  queue: string | null;
  error: string;
  attempts: number;
  created_at: string;
  parked_at: string;
  message: BusMessage;
}

/** What one relay pass did: rows claimed, rows gone from the outbox, and whether the bus was away. */
interface PassResult {
  /** messages claimed */
  claimed: number;
  removed: number;
  down?: unknown;
  /** more rows were due than the pass took */
  full?: boolean;
}

export interface WriteOptions {
  /**
   * The write may share its transaction with others begun at the same moment
   * (group commit, `Database.sharedTx`): for writes that come in bursts and do
   * nothing in fn but statements on its transaction and emitting.
   */
  shared?: boolean;
}

/**
 * Transactional outbox and its relay. `write()` runs a change and inserts its
 * messages in the same transaction; after commit the relay is kicked and
 * publishes them with confirms, deleting each batch only once the broker has
 * confirmed it. Rows are claimed with FOR UPDATE SKIP LOCKED, so replicas
 * share the work.
 *
 * Two kinds of failure are kept apart. The bus away (no connection, a channel
 * lost, no confirm in time) is the broker's state, not the messages': their rows
 * are left as they are, the relay logs once that it is down and tries again on
 * the next poll and at once when the bus reconnects. A message refused on its
 * own (a negative confirm, an in-process consumer failing on it) is retried with
 * backoff on its row while the rest of its batch goes on, and is set aside in
 * the dead-letter table when the consumer gives up or the broker has refused it
 * MAX_BROKER_REFUSALS times.
 */
export class Outbox {
  private timer?: NodeJS.Timeout;
  private readonly table;
  private readonly deadTable;
  private readonly relay: CoalescedRunner;
  /** set while the bus is away: since when, and how many passes failed on it */
  private down?: { since: number; passes: number };
  /** stop() has run: a second call (a service stopping after its process flushed) does nothing */
  private stopped = false;
  /** relay passes failing (the database away): logged when they start and stop failing */
  private readonly passFailures: OutageLog;
  private unregisterDeadLetters?: () => void;

  constructor(private readonly opts: OutboxOptions) {
    this.table = sql.raw(`${opts.schema}.outbox`);
    this.deadTable = sql.raw(`${opts.schema}.dead_letters`);
    // a full batch means there may be more: drain again at once
    this.relay = new CoalescedRunner(
      async () => {
        const r = await this.passes(opts.publishTimeoutMs ?? 10_000);
        this.passFailures.success('outbox relay', { service: opts.service });
        return !r.down && r.claimed > 0 && r.full;
      },
      // a pass runs every poll: the database away would be a line a second
      (err) => this.passFailures.failure('outbox relay', err, { service: opts.service }),
      undefined,
      { spacingMs: opts.db.kind === 'pglite' ? EMBEDDED_PASS_SPACING_MS : 0 },
    );
    this.passFailures = new OutageLog(opts.log);
    // a backlog goes out as soon as the broker is back, not at the next poll
    opts.bus.onConnected?.(() => this.kick());
  }

  private get batchSize(): number {
    return this.opts.batchSize ?? DEFAULT_BATCH;
  }

  private get leased(): boolean {
    return this.opts.bus.deliversInProcess || this.opts.db.kind === 'pglite';
  }

  /**
   * Runs fn in a transaction whose emitted messages commit with it. The first
   * write of a keyed call also claims the call's receipt in it: first thing, so
   * that a retry of a call that already wrote waits for it and then fails before
   * doing anything; or, when `answer` gives the call's answer from fn's result
   * (the generic records engine), last, with that answer, so that the answer
   * commits with the write. With `opts.shared` the transaction may be shared
   * with other writes (decision 034), and fn may run a second time, alone.
   */
  async write<T>(
    caller: CallerContext | null,
    fn: (tx: Tx, emit: Emitter) => Promise<T>,
    answer?: (result: T) => unknown,
    opts: WriteOptions = {},
  ): Promise<T> {
    const receipts = this.opts.receipts;
    const claim = receipts?.beginClaim();
    let answered = false;
    let emit!: Emitter;
    let out: T;
    try {
      const db = this.opts.db;
      const run = (f: (tx: Tx) => Promise<T>) => (opts.shared ? db.sharedTx(f) : db.tx(f));
      out = await run(async (tx) => {
        // per run: a transaction shared with other writes may fail for one of them
        // and run again alone, and only what this run emitted commits
        emit = new Emitter(this.opts.service, caller);
        answered = false;
        if (claim && !answer) await receipts!.claim(tx, claim);
        const result = await fn(tx, emit);
        // nothing waits for these answers: they travel with the COMMIT (a failure
        // rolls the transaction back and is what the write rejects with)
        if (claim && answer) {
          const given = answer(result);
          answered = given !== undefined;
          // the claim with the answer goes last: made by the outbox rows' INSERT when
          // there are any (one statement fewer), else alone
          const messages = emit.messages;
          const within = messages.length ? (claimInsert: SQL) => this.insertStatement(messages, claimInsert) : undefined;
          pipelined(tx, () => receipts!.claim(tx, claim, given, within));
        } else if (emit.messages.length) pipelined(tx, () => this.insert(tx, emit.messages));
        if (emit.sets.length) pipelined(tx, () => this.insertSets(tx, emit.sets));
        return result;
      });
    } catch (err) {
      if (claim) receipts!.settleClaim('rolled back');
      throw err;
    }
    // without an answer from the write, the gRPC server keeps the handler's
    // `answered` is set inside the transaction's callback, which the compiler does not follow
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition
    if (claim) receipts!.settleClaim(answered ? 'answered' : 'claimed');
    if (emit.messages.length || emit.sets.length) this.kick();
    return out;
  }

  /** Inserts messages in the caller's transaction (for code that manages its own). */
  async insert(tx: Tx, messages: BusMessage[]): Promise<void> {
    if (messages.length) await tx.execute(this.insertStatement(messages));
  }

  /**
   * The INSERT of messages' outbox rows, with the trace of the request that
   * writes them (continued by their consumers). `alsoInsert`: another INSERT the
   * same statement makes, as a WITH clause (a keyed call's receipt, write()).
   */
  private insertStatement(messages: BusMessage[], alsoInsert?: SQL): SQL {
    const also = alsoInsert ? sql`with also as (${alsoInsert}) ` : sql``;
    const trace = activeTraceCarrier();
    const values = messages.map(
      (m) => sql`(${m.id}::uuid, ${m.type}, ${JSON.stringify(m)}::jsonb, ${trace?.traceparent ?? null}::text, ${trace?.tracestate ?? null}::text)`,
    );
    return sql`${also}insert into ${this.table} (id, type, message, traceparent, tracestate) values ${sql.join(values, sql`, `)}`;
  }

  /**
   * Inserts rows of several messages (Emitter.eventsJson). The array is kept as a
   * JSON string (to_jsonb of the text): PostgreSQL neither parses it nor renders
   * it again, and the relay reads back the text it was given. Such rows are due
   * at 'infinity', a time relays that predate them never reach (they would
   * publish the array as one message); this relay takes them (DUE).
   */
  async insertSets(tx: Tx, sets: readonly MessageSet[]): Promise<void> {
    const trace = activeTraceCarrier();
    const values = sets.map(
      (m) =>
        sql`(${m.id}::uuid, ${m.type}, to_jsonb(${m.json}::text), ${m.count}::int, 'infinity'::timestamptz, ${trace?.traceparent ?? null}::text, ${trace?.tracestate ?? null}::text)`,
    );
    await tx.execute(
      sql`insert into ${this.table} (id, type, message, messages, next_attempt_at, traceparent, tracestate) values ${sql.join(values, sql`, `)}`,
    );
  }

  start(): void {
    this.stopped = false;
    this.unregisterDeadLetters ??= registerOutboxCounts(this.opts.service, { pending: () => this.backlog(), deadLetters: () => this.deadLetterCount() });
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
   * Publishes one batch; returns how many rows it took off the outbox (published,
   * or set aside as dead letters). A broker in another process gets the batch
   * under row locks, an in-process bus (or the embedded database's one
   * connection) under a lease.
   */
  async drainOnce(): Promise<number> {
    return (await this.pass(this.opts.publishTimeoutMs ?? 10_000)).removed;
  }

  /**
   * `concurrency` passes at once (one on the leased path); `full` when one found
   * a full batch. Each pass starts once the one before has claimed a full batch,
   * and claims after it (seq above that batch's last): its index scan then starts
   * past the rows the other passes of this process hold, instead of stepping over
   * each of them locked (SKIP LOCKED still keeps replicas apart).
   */
  private async passes(timeoutMs: number): Promise<PassResult & { full: boolean }> {
    const n = this.leased ? 1 : Math.max(1, this.opts.concurrency ?? DEFAULT_CONCURRENCY);
    const running: Promise<PassResult>[] = [];
    let after: string | undefined;
    for (let k = 0; k < n; k++) {
      let claimedUpTo!: (seq: string | undefined) => void;
      const claimed = new Promise<string | undefined>((resolve) => (claimedUpTo = resolve));
      running.push(this.pass(timeoutMs, after, claimedUpTo).finally(() => claimedUpTo(undefined)));
      after = await claimed;
      if (after === undefined) break;
    }
    const results = await Promise.all(running);
    return {
      claimed: results.reduce((a, r) => a + r.claimed, 0),
      removed: results.reduce((a, r) => a + r.removed, 0),
      down: results.find((r) => r.down)?.down,
      full: results.some((r) => r.full === true),
    };
  }

  /**
   * One batch. `after`: claim only rows past this seq; `claimedUpTo` is told the
   * last seq of a full batch once it is claimed (undefined otherwise).
   */
  private async pass(timeoutMs: number, after?: string, claimedUpTo?: (seq: string | undefined) => void): Promise<PassResult> {
    const r = this.leased ? await this.drainLeased(timeoutMs) : await this.drainLocked(timeoutMs, after, claimedUpTo);
    metrics().outboxBacklog.set({ service: this.opts.service }, r.claimed);
    if (r.down) this.busDown(r.down);
    else if (r.claimed) this.busUp();
    return r;
  }

  /**
   * Rows are locked FOR UPDATE SKIP LOCKED (replicas, and the passes running at
   * once, share the work) by a transaction that publishes them and deletes them
   * once the broker has confirmed. Nothing is written to claim them: the lease
   * UPDATE this replaces wrote a new version of every row, a seventh of a keyed
   * write's WAL. A relay that dies mid-batch releases its rows at once with its
   * connection, and a publish is bounded in time, so a broker that stops
   * answering cannot hold the locks. The bus away leaves the rows untouched.
   */
  private async drainLocked(timeoutMs: number, after?: string, claimedUpTo?: (seq: string | undefined) => void): Promise<PassResult> {
    return this.opts.db.tx(async (tx) => {
      const locked = await rows<ClaimedRow>(
        tx,
        // as many rows as fit, locked in seq order skipping those other passes and
        // replicas hold (so each takes the next ones)
        sql`${PLANNED_PER_CALL}${this.dueRows(after)}
            select ${claimedColumns()}
            from ${this.table} t where ${DUE} ${after === undefined ? sql`` : sql`and t.seq > ${after}::bigint`}
            order by t.seq limit (select n from fit) for update skip locked`,
      );
      // rows taken past one another pass holds may be larger than those counted:
      // the ones past the batch stay locked and untouched until this pass ends
      const kept = this.fitting(locked);
      const claimed = kept.length < locked.length ? kept : locked;
      const full = claimed[0]?.more === true || claimed.length < locked.length;
      claimedUpTo?.(full ? claimed[claimed.length - 1]!.seq : undefined);
      if (!claimed.length) return { claimed: 0, removed: 0 };
      let outcome: PublishOutcome | void;
      try {
        outcome = await this.publishInTime(this.publish(claimed), timeoutMs);
      } catch (down) {
        // the transaction ends without a write: the rows are unlocked as they were
        return { claimed: messagesIn(claimed), removed: 0, down };
      }
      // the rows' fate goes with the COMMIT, sent right behind these statements
      const removed = this.settle(tx, claimed, outcome);
      return { claimed: messagesIn(claimed), removed, full };
    });
  }

  /**
   * A WITH clause sizing a pass (`fit`): `n`, how many of the first due rows (past
   * `after`) in seq order hold up to batchSize messages (a row of several counting
   * as its messages; at least one row), and `more`, whether more were due. Read
   * without locks (the pass locks what it takes). Ordered by the column t.seq: the
   * primary key's index scan, which skips deleted rows' entries once seen.
   */
  private dueRows(after?: string): SQL {
    const size = this.batchSize;
    return sql`with fit as (
        select count(*) filter (where d.upto <= ${size} or d.k = 1) as n,
               count(*) filter (where d.upto > ${size} and d.k > 1) > 0 or count(*) = ${size} as more
        from (select d.seq, sum(d.messages) over (order by d.seq) as upto, row_number() over (order by d.seq) as k
              from (select t.seq, coalesce(t.messages, 1) as messages from ${this.table} t
                    where ${DUE} ${after === undefined ? sql`` : sql`and t.seq > ${after}::bigint`}
                    order by t.seq limit ${size}) d) d
      )`;
  }

  /** The first of `rows` (in seq order) holding up to batchSize messages, and at least one. */
  private fitting(rows: ClaimedRow[]): ClaimedRow[] {
    let n = 0;
    for (let k = 0; k < rows.length; k++) {
      n += countOf(rows[k]!);
      if (k > 0 && n > this.batchSize) return rows.slice(0, k);
    }
    return rows;
  }

  /**
   * Rows are claimed with a lease by one statement and published outside any
   * transaction: the in-process bus writes to the same (possibly embedded, one
   * connection) database while it delivers. A process that dies mid-batch
   * leaves the rows to come due again when the lease ends: at least once,
   * never lost. The bus away gives the lease back at once.
   *
   * On the embedded database no other process can take this outbox's rows, so
   * nothing is written to claim them: this outbox's passes take turns instead
   * (the lease rewrote every row it claimed, about a sixth of the embedded
   * engine's time under keyed load; decision 065). A process that dies mid-batch
   * leaves the rows due, and they go at its next start.
   */
  private async drainLeased(timeoutMs: number): Promise<PassResult> {
    if (this.opts.db.kind !== 'pglite')
      return this.drainClaimed(
        timeoutMs,
        () => this.lease(),
        (claimed) => this.giveBack(claimed),
      );
    const turn = this.turn.then(() => this.drainClaimed(timeoutMs, () => this.opts.db.rows<ClaimedRow>(this.dueSelect())));
    this.turn = turn.then(
      () => undefined,
      () => undefined,
    );
    return turn;
  }

  /** The end of the last embedded pass of this outbox (drainLeased). */
  private turn: Promise<void> = Promise.resolve();

  /** The rows that fit, leased: as they are the only relay on this outbox (one pass at a time). */
  private lease(): Promise<ClaimedRow[]> {
    // One statement, so its own transaction: no BEGIN and COMMIT round trips.
    // The claimed rows are updated by their ctid (a TID scan): joined by id,
    // PostgreSQL scanned the whole table, dead rows of earlier batches included.
    return this.opts.db.rows<ClaimedRow>(
      sql`${PLANNED_PER_CALL}${this.dueRows()}, leased as (
            update ${this.table} set next_attempt_at = now() + interval '30 seconds'
            where ctid = any(array(select ctid from ${this.table} t where ${DUE} order by t.seq limit (select n from fit) for update skip locked))
            returning id, seq, type, message, messages, attempts, created_at, traceparent, tracestate)
          select ${claimedColumns()}
          from leased t order by t.seq`,
    );
  }

  /** The rows that fit, read without a claim (the embedded database's passes take turns). */
  private dueSelect(): SQL {
    return sql`${PLANNED_PER_CALL}${this.dueRows()}
      select ${claimedColumns()}
      from ${this.table} t where ${DUE} order by t.seq limit (select n from fit)`;
  }

  /** The lease of rows the bus did not take given back (a row of several due again at 'infinity', see insertSets). */
  private async giveBack(claimed: ClaimedRow[]): Promise<void> {
    const ids = sqlArray(claimed.map((r) => r.id));
    await this.opts.db.orm.execute(
      sql`${PLANNED_PER_CALL}update ${this.table} set next_attempt_at = case when messages is null then now() else 'infinity' end where id = any(${ids}::uuid[])`,
    );
  }

  /** One pass over the rows `claim` takes; with the bus away, `release` undoes the claim (none when nothing was written). */
  private async drainClaimed(timeoutMs: number, claim: () => Promise<ClaimedRow[]>, release?: (claimed: ClaimedRow[]) => Promise<void>): Promise<PassResult> {
    const { db } = this.opts;
    const claimed = await claim();
    if (!claimed.length) return { claimed: 0, removed: 0 };
    const full = claimed[0]!.more;
    let outcome: PublishOutcome | void;
    try {
      // A broker in another process (embedded database with RabbitMQ) is given the
      // same time limit as under row locks: one that stops confirming (a memory or
      // disk alarm) must not stall the relay and a graceful stop behind it. The
      // in-process bus resolves once its consumers are done, which takes as long
      // as they take.
      const publishing = this.publish(claimed);
      outcome = await (this.opts.bus.deliversInProcess ? publishing : this.publishInTime(publishing, timeoutMs));
    } catch (down) {
      await release?.(claimed);
      return { claimed: messagesIn(claimed), removed: 0, down };
    }
    const removed = await db.tx(async (tx) => this.settle(tx, claimed, outcome));
    return { claimed: messagesIn(claimed), removed, full };
  }

  /**
   * Hands the statements that settle a published batch to the transaction
   * (pipelined: they travel with its COMMIT): confirmed rows deleted, set-aside
   * ones moved to the dead-letter table, refused ones given a backoff. A row of
   * several messages goes once all of them went. Refused as a whole (one bundle
   * a broker refused), each of its messages becomes a row of its own with the
   * row's backoff; when some of its messages were refused (in process), those
   * become rows of their own, then set aside or retried as any other, and the
   * ones that went are not sent again. Returns how many messages leave the outbox.
   */
  private settle(tx: Tx, claimed: ClaimedRow[], outcome: PublishOutcome | void): number {
    const refusals = new Map<string, Refusal[]>();
    for (const r of outcome?.refused ?? []) refusals.set(r.id, [...(refusals.get(r.id) ?? []), r]);
    const done: ClaimedRow[] = [];
    const dead: { id: string; attempts: number; queue: string | null; error: string }[] = [];
    const retry: string[] = [];
    const wait: string[] = [];
    /** rows of several refused whole, by whether they wait (transient) or back off */
    const whole = { wait: [] as ClaimedRow[], retry: [] as ClaimedRow[] };
    /** rows of several some of whose messages were refused, and those messages' ids */
    const some: { row: ClaimedRow; ids: string[] }[] = [];
    const judge = (id: string, attempts: number, refused: Refusal[]) => {
      if (refused.every((r) => r.deadFor)) {
        dead.push({ id, attempts, queue: refused.map((r) => r.deadFor).join(', '), error: refused[0]!.error });
      } else if (!this.opts.bus.deliversInProcess && attempts + 1 >= MAX_BROKER_REFUSALS) {
        dead.push({ id, attempts, queue: null, error: refused[0]!.error });
      } else if (refused.every((r) => r.transient)) {
        wait.push(id);
      } else {
        retry.push(id);
      }
    };
    for (const row of claimed) {
      const refused = refusals.get(row.id);
      if (row.messages === null) {
        if (refused) judge(row.id, row.attempts, refused);
        else done.push(row);
      } else if (refused) {
        (refused.every((r) => r.transient) ? whole.wait : whole.retry).push(row);
      } else {
        // read only when something was refused: a bus in process refuses messages one by one
        const ids = refusals.size ? (JSON.parse(row.message) as BusMessage[]).map((m) => m.id).filter((id) => refusals.has(id)) : [];
        if (!ids.length) done.push(row);
        else {
          some.push({ row, ids });
          for (const id of ids) judge(id, 0, refusals.get(id)!);
        }
      }
    }
    if (done.length) {
      const ids = sqlArray(done.map((r) => r.id));
      pipelined(tx, () => tx.execute(sql`${PLANNED_PER_CALL}delete from ${this.table} where id = any(${ids}::uuid[])`));
    }
    // first thing after the deletes: the statements below find the messages as rows
    if (some.length)
      this.split(
        tx,
        some.map((s) => s.row),
        some.flatMap((s) => s.ids),
        0,
        0,
      );
    if (whole.retry.length) this.split(tx, whole.retry, undefined, 1, 250 * 2);
    if (whole.wait.length) this.split(tx, whole.wait, undefined, 0, 1_000);
    const left = retry.length + wait.length + [...whole.retry, ...whole.wait].reduce((n, r) => n + countOf(r), 0);
    const removed = messagesIn(claimed) - left;
    if (removed > dead.length) this.published([...done, ...some.map((x) => x.row)], removed - dead.length);
    if (dead.length) {
      const ids = sqlArray(dead.map((d) => d.id));
      const queues = sqlArray(dead.map((d) => d.queue));
      const errors = sqlArray(dead.map((d) => d.error.slice(0, 2_000)));
      pipelined(tx, () =>
        tx.execute(sql`with moved as (delete from ${this.table} where id = any(${ids}::uuid[])
                                      returning id, type, message, attempts, created_at)
          insert into ${this.deadTable} (id, type, message, queue, error, attempts, created_at)
          select m.id, m.type, m.message, d.queue, d.error, m.attempts + 1, m.created_at
          from moved m join unnest(${ids}::uuid[], ${queues}::text[], ${errors}::text[]) as d(id, queue, error) on d.id = m.id
          on conflict (id) do update set message = excluded.message, queue = excluded.queue, error = excluded.error,
            attempts = excluded.attempts, parked_at = now()`),
      );
      metrics().outboxDeadLetters.inc({ service: this.opts.service }, dead.length);
      for (const d of dead) {
        this.opts.log.error(
          { id: d.id, queue: d.queue, error: d.error, attempts: d.attempts + 1 },
          'message set aside in the dead-letter table (list and replay: /admin/v1/dead-letters)',
        );
      }
    }
    if (retry.length) {
      // exponential backoff per row, from the refusals it has had
      pipelined(tx, () =>
        tx.execute(sql`${PLANNED_PER_CALL}update ${this.table} set attempts = attempts + 1,
            next_attempt_at = now() + least(30000, 250 * power(2, least(attempts + 1, 7))) * interval '1 millisecond'
          where id = any(${sqlArray(retry)}::uuid[])`),
      );
    }
    if (wait.length) {
      // a consumer's dependency away for now: not counted, tried again shortly
      pipelined(tx, () =>
        tx.execute(sql`${PLANNED_PER_CALL}update ${this.table} set next_attempt_at = now() + interval '1 second'
          where id = any(${sqlArray(wait)}::uuid[])`),
      );
    }
    if (left) {
      metrics().outboxPublishFailures.inc({ service: this.opts.service }, left);
      this.opts.log.warn(
        { refused: left, ids: [...retry, ...wait, ...whole.retry.map((r) => r.id), ...whole.wait.map((r) => r.id)].slice(0, 10) },
        'outbox messages refused, will retry them',
      );
    }
    return removed;
  }

  /**
   * Makes messages of rows of several rows of their own (all of them, or those of
   * `ids`), due after `delayMs` with `attempts`, and deletes the rows; pipelined.
   */
  private split(tx: Tx, rows: readonly ClaimedRow[], ids: readonly string[] | undefined, attempts: number, delayMs: number): void {
    const which = ids ? sql`where m.v->>'id' = any(${sqlArray(ids)}::text[])` : sql``;
    pipelined(tx, () =>
      tx.execute(sql`with b as (delete from ${this.table} where id = any(${sqlArray(rows.map((r) => r.id))}::uuid[])
                                returning type, message, created_at, traceparent, tracestate)
        insert into ${this.table} (id, type, message, attempts, next_attempt_at, created_at, traceparent, tracestate)
        select (m.v->>'id')::uuid, b.type, m.v, ${attempts}::int, now() + ${delayMs}::int * interval '1 millisecond', b.created_at, b.traceparent, b.tracestate
        from b cross join lateral jsonb_array_elements((b.message #>> '{}')::jsonb) as m(v) ${which}`),
    );
  }

  private publishInTime(publishing: Promise<PublishOutcome | void>, ms: number): Promise<PublishOutcome | void> {
    return withTimeout(publishing, ms, `no confirmation within ${ms} ms`);
  }

  private publish(claimed: ClaimedRow[]): Promise<PublishOutcome | void> {
    if (tracingOn()) return this.publishTraced(claimed);
    const { bus } = this.opts;
    // a broker in another process takes the rows' JSON text as it is
    if (bus.publishSerialized && !bus.deliversInProcess) {
      return bus.publishSerialized(
        claimed.map((r) => ({ id: r.id, type: r.type, request_id: r.request_id ?? undefined, body: r.message, count: r.messages ?? undefined })),
      );
    }
    return bus.publish(claimed.flatMap(messagesOfRow));
  }

  /**
   * publish() with tracing on: each message goes out in the trace of the write
   * that stored it. To RabbitMQ the bus publishes it inside that context (the
   * instrumentation makes the producer span and puts its context in the
   * headers); for the in-process bus the relay makes the producer span itself
   * and hands its context over with the message. Either way the span's start
   * shows how long the row waited in the outbox.
   */
  private async publishTraced(claimed: ClaimedRow[]): Promise<PublishOutcome | void> {
    const { bus, service } = this.opts;
    const stored = (r: ClaimedRow): TraceCarrier | undefined =>
      r.traceparent ? { traceparent: r.traceparent, tracestate: r.tracestate ?? undefined } : undefined;
    if (bus.publishSerialized && !bus.deliversInProcess) {
      return bus.publishSerialized(
        claimed.map((r) => ({
          id: r.id,
          type: r.type,
          request_id: r.request_id ?? undefined,
          body: r.message,
          count: r.messages ?? undefined,
          trace: stored(r),
        })),
      );
    }
    const spans = claimed.map((r) => {
      const parent = stored(r);
      return parent
        ? startDetachedSpan(`publish ${r.type}`, SpanKind.PRODUCER, parent, {
            'messaging.system': 'in_process',
            'messaging.operation': 'publish',
            'messaging.rabbitmq.routing_key': r.type,
            'messaging.message_id': r.id,
            'lab.outbox.service': service,
            'lab.outbox.wait_s': r.age_s,
          })
        : undefined;
    });
    try {
      // a row of several: each of its messages in the row's trace
      const rows = claimed.map(messagesOfRow);
      const outcome = await bus.publish(
        rows.flat(),
        rows.flatMap((ms, i) => ms.map(() => spans[i]?.carrier)),
      );
      const refused = new Map((outcome?.refused ?? []).map((r) => [r.id, r.error]));
      rows.forEach((ms, i) => {
        const failed = ms.find((m) => refused.has(m.id));
        if (failed && spans[i]) failSpan(spans[i].span, refused.get(failed.id));
      });
      return outcome;
    } catch (err) {
      for (const s of spans) if (s) failSpan(s.span, err);
      throw err;
    } finally {
      for (const s of spans) s?.span.end();
    }
  }

  /** The bus away: logged when it starts (not on every pass), counted on every pass. */
  private busDown(err: unknown): void {
    metrics().outboxPublishFailures.inc({ service: this.opts.service });
    if (this.down) {
      this.down.passes++;
      return;
    }
    this.down = { since: Date.now(), passes: 1 };
    this.opts.log.warn({ err: errText(err) }, 'outbox relay: message bus unavailable; events stay in the outbox until it is back');
  }

  /** The bus back: logged once, with how long it was away and the backlog it left. */
  private busUp(): void {
    const was = this.down;
    if (!was) return;
    this.down = undefined;
    void this.backlog().then(
      (backlog) =>
        this.opts.log.info({ down_ms: Date.now() - was.since, failed_passes: was.passes, backlog }, 'outbox relay: message bus back, publishing the backlog'),
      () => undefined,
    );
  }

  /** Messages waiting in the outbox. */
  async backlog(): Promise<number> {
    return (await this.opts.db.rows<{ n: number }>(sql`select coalesce(sum(coalesce(messages, 1)), 0)::int as n from ${this.table}`))[0]!.n;
  }

  /** `count` messages published, of `rows` (how long each waited). */
  private published(rows: readonly ClaimedRow[], count: number): void {
    const { service } = this.opts;
    metrics().outboxPublished.inc({ service }, count);
    for (const r of rows) metrics().outboxLag.observe({ service }, r.age_s);
  }

  /** Messages in the dead-letter table (lab_dead_letters). */
  async deadLetterCount(): Promise<number> {
    return (await this.opts.db.rows<{ n: number }>(sql`select count(*)::int as n from ${this.deadTable}`))[0]!.n;
  }

  /** The dead letters, latest first, and how many there are. */
  async deadLetters(limit: number, offset: number): Promise<{ data: DeadLetter[]; total: number }> {
    const [data, [count]] = await Promise.all([
      this.opts.db.rows<DeadLetter>(
        sql`select id::text, type, queue, error, attempts, ${utcMicros(sql.raw('created_at'))} as created_at,
                   ${utcMicros(sql.raw('parked_at'))} as parked_at, message
            from ${this.deadTable} order by parked_at desc, id limit ${limit} offset ${offset}`,
      ),
      this.opts.db.rows<{ n: number }>(sql`select count(*)::int as n from ${this.deadTable}`),
    ]);
    return { data, total: count!.n };
  }

  /**
   * Puts a dead letter back into the outbox, with its id (consumers that had it
   * drop it by their inbox) and a fresh count of attempts; false when there is no
   * such dead letter. The relay is kicked at once.
   */
  async replayDeadLetter(id: string): Promise<boolean> {
    const moved = await this.opts.db.rows<{ id: string }>(
      sql`with d as (delete from ${this.deadTable} where id = ${id}::uuid returning id, type, message)
          insert into ${this.table} (id, type, message) select id, type, message from d
          on conflict (id) do nothing returning id::text`,
    );
    if (moved.length) this.kick();
    return moved.length > 0;
  }

  /**
   * Stops polling and publishes what it can of the backlog until `deadline`
   * (default: stopFlushMs from now), each batch bounded by what is left of it;
   * the rest stays in the outbox for the next start (used on SIGTERM).
   */
  async stop(deadline = Date.now() + (this.opts.stopFlushMs ?? DEFAULT_STOP_FLUSH_MS)): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    if (this.stopped) return;
    this.stopped = true;
    this.unregisterDeadLetters?.();
    this.unregisterDeadLetters = undefined;
    // the pass under way is waited for until the deadline at most: one stuck on a
    // broker that stopped confirming must not hold the stop (its rows stay locked
    // or leased, so they stay in the outbox)
    const running = this.relay.stop();
    if (deadline > Date.now()) await withTimeout(running, deadline - Date.now(), 'relay pass still running').catch(() => undefined);
    let flushed = 0;
    try {
      for (let left = deadline - Date.now(); left > 0; left = deadline - Date.now()) {
        const r = await this.passes(Math.min(left, this.opts.publishTimeoutMs ?? 10_000));
        flushed += r.removed;
        if (r.down || !r.full) break;
      }
      const backlog = await this.backlog();
      if (flushed || backlog) this.opts.log.info({ flushed, backlog }, 'outbox flushed on stop; what is left stays for the next start');
    } catch (err) {
      this.opts.log.warn({ err }, 'outbox flush on stop failed; rows stay for the next start');
    }
  }
}
