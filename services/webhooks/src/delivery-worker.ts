import { sql } from 'drizzle-orm';
import { CoalescedRunner, failSpan, inSpan, OutageLog, rows, SpanKind, tracingOn, type Database, type Logger, type Outbox } from '@lab/kit';
import { retryDelay, type WebhooksConfig } from './config.js';
import { disableIfFailing } from './auto-disable.js';
import { postOnce, type SendOutcome } from './sender.js';
import { signatureHeaders, type SignatureScheme } from './signature-schemes.js';

/** The end of one attempt that is not the last failure: delivered, or due again after delay_ms. */
interface Ended {
  id: string;
  ok: boolean;
  attempts: number;
  code: number | null;
  error: string | null;
  delay_ms: number | null;
}

/** Largest batch of ended attempts written in one statement. */
const RECORD_BATCH = 500;

/**
 * Writes ended attempts in batches: one statement for all the attempts that
 * ended while the previous statement ran, instead of one round trip each. Each
 * caller's promise settles when its row is written, so a delivery's slot is
 * held until then, exactly as with one statement per attempt; a failed write
 * leaves its rows leased and they are attempted again after the lease
 * (at-least-once, same delivery id).
 */
class BatchRecorder {
  private queue: { e: Ended; done: (err?: unknown) => void }[] = [];
  private running = false;

  constructor(private readonly db: Database) {}

  add(e: Ended): Promise<void> {
    return new Promise((resolve, reject) => {
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- passes on what the batch's write threw
      this.queue.push({ e, done: (err) => (err === undefined ? resolve() : reject(err)) });
      if (!this.running) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.running = true;
    while (this.queue.length) {
      // in id order, so two writers of overlapping rows (an expired lease) lock them in one order
      const batch = this.queue.splice(0, RECORD_BATCH).sort((a, b) => (a.e.id < b.e.id ? -1 : 1));
      try {
        await this.write(batch.map((b) => b.e));
        for (const b of batch) b.done();
      } catch (err) {
        for (const b of batch) b.done(err ?? new Error('delivery record failed'));
      }
    }
    this.running = false;
  }

  private async write(ended: Ended[]): Promise<void> {
    await this.db.orm.execute(sql`update webhooks.deliveries d
        set status = case when v.ok then 'delivered' else 'pending' end,
            attempts = v.attempts, last_status_code = v.code, last_error = v.error,
            delivered_at = case when v.ok then now() else d.delivered_at end,
            next_attempt_at = case when v.ok then null else now() + (v.delay_ms * interval '1 millisecond') end
        from json_to_recordset(${JSON.stringify(ended)}::json)
             as v(id uuid, ok boolean, attempts integer, code integer, error text, delay_ms integer)
        where d.id = v.id and d.status = 'pending'`);
  }
}

interface Claimed {
  id: string;
  org_id: string;
  subscription_id: string;
  event: string;
  data: string;
  host: string;
  attempts: number;
  url: string;
  secret: string;
  /** the secret a rotation replaced, while it still signs (24 hours) */
  previous_secret: string | null;
  signature_scheme: SignatureScheme;
  /** the trace of the event the delivery came from (null when it was not traced) */
  traceparent: string | null;
  tracestate: string | null;
}

/** How long a claimed delivery stays invisible to other workers: the request timeout plus margin. */
const leaseMs = (cfg: WebhooksConfig) => cfg.timeoutMs + 30_000;

const USER_AGENT = 'lab-notebook-webhooks/1.0';

/**
 * Sends due deliveries. The schedule lives in PostgreSQL: a worker claims due
 * rows with FOR UPDATE SKIP LOCKED and moves their next_attempt_at past a
 * lease, so replicas never send one attempt twice and a crashed worker's rows
 * come due again. At most `concurrency` requests run at once, and at most
 * `perHostConcurrency` per receiver host: a slow receiver fills its own slots,
 * never the pool.
 */
export class DeliveryWorker {
  private timer?: NodeJS.Timeout;
  private stopped = true;
  // the claim runs every poll: the database away is logged as it starts and ends
  private readonly claimer = new CoalescedRunner(
    () => this.claimFree(),
    (err) => this.claims.failure('webhook delivery claims', err),
    () => this.claims.success('webhook delivery claims'),
  );
  private readonly inFlight = new Map<string, Promise<void>>();
  private readonly perHost = new Map<string, number>();
  private readonly recorder: BatchRecorder;
  private readonly claims: OutageLog;

  constructor(
    private readonly db: Database,
    private readonly outbox: Outbox,
    private readonly cfg: WebhooksConfig,
    private readonly log: Logger,
  ) {
    this.recorder = new BatchRecorder(db);
    this.claims = new OutageLog(log);
  }

  start(): void {
    this.stopped = false;
    this.claimer.resume();
    const tick = () => {
      this.kick();
      this.timer = setTimeout(tick, this.cfg.pollMs);
      this.timer.unref();
    };
    tick();
  }

  /** Looks for due deliveries now; concurrent kicks coalesce. */
  kick(): void {
    if (!this.stopped) this.claimer.kick();
  }

  /** Fills the free slots; a batch that took every free slot may have left more due. */
  private async claimFree(): Promise<boolean> {
    const free = this.cfg.concurrency - this.inFlight.size;
    if (free <= 0) return false;
    const batch = await this.claim(free);
    for (const d of batch) this.launch(d);
    return batch.length === free;
  }

  /**
   * Claims up to `limit` due deliveries, at most `perHostConcurrency` of each
   * host (hosts already full in this process are skipped), earliest due first.
   * The distinct hosts with pending rows are walked by a loose index scan and
   * each gives its earliest due rows, so the cost follows the number of hosts,
   * not the depth of the backlog.
   */
  private async claim(limit: number): Promise<Claimed[]> {
    const full = [...this.perHost.entries()].filter(([, n]) => n >= this.cfg.perHostConcurrency).map(([h]) => h);
    const notFull = full.length
      ? sql`and h.host not in (${sql.join(
          full.map((h) => sql`${h}`),
          sql`, `,
        )})`
      : sql``;
    const claimed = await rows<Claimed>(
      this.db.orm,
      sql`with recursive hosts(host) as (
            (select host from webhooks.deliveries where status = 'pending' order by host limit 1)
            union all
            select (select d.host from webhooks.deliveries d where d.status = 'pending' and d.host > hosts.host order by d.host limit 1)
            from hosts where hosts.host is not null
          ), due as (
            select c.id from hosts h cross join lateral (
              select d.id from webhooks.deliveries d
              where d.status = 'pending' and d.host = h.host and d.next_attempt_at <= now()
              order by d.next_attempt_at limit ${this.cfg.perHostConcurrency}
            ) c where h.host is not null ${notFull}
          ), locked as (
            select d.id from webhooks.deliveries d where d.id in (select id from due)
              and d.status = 'pending' and d.next_attempt_at <= now()
            order by d.next_attempt_at, d.id limit ${limit} for update skip locked
          )
          update webhooks.deliveries d set next_attempt_at = now() + (${leaseMs(this.cfg)} * interval '1 millisecond')
          from locked, webhooks.subscriptions s
          where d.id = locked.id and s.org_id = d.org_id and s.id = d.subscription_id
          returning d.id::text, d.org_id::text, d.subscription_id::text, d.event, d.data::text as data, d.host, d.attempts,
                    s.url, s.secret, s.signature_scheme, d.traceparent, d.tracestate,
                    case when s.previous_secret_expires_at > now() then s.previous_secret end as previous_secret`,
    );
    // a host may still exceed its share (rows of one host claimed in one batch
    // while others are in flight): those go back at once, due again
    const keep: Claimed[] = [];
    const release: string[] = [];
    const counts = new Map(this.perHost);
    for (const d of claimed) {
      const n = counts.get(d.host) ?? 0;
      if (n >= this.cfg.perHostConcurrency) release.push(d.id);
      else {
        counts.set(d.host, n + 1);
        keep.push(d);
      }
    }
    if (release.length) {
      await this.db.orm.execute(
        sql`update webhooks.deliveries set next_attempt_at = now() where id in (${sql.join(
          release.map((id) => sql`${id}::uuid`),
          sql`, `,
        )}) and status = 'pending'`,
      );
    }
    return keep;
  }

  private launch(d: Claimed): void {
    this.perHost.set(d.host, (this.perHost.get(d.host) ?? 0) + 1);
    const p = this.attempt(d)
      .catch((err: unknown) => this.log.error({ err, delivery_id: d.id }, 'webhook delivery bookkeeping failed; retried after the lease'))
      .finally(() => {
        this.inFlight.delete(d.id);
        const n = (this.perHost.get(d.host) ?? 1) - 1;
        if (n <= 0) this.perHost.delete(d.host);
        else this.perHost.set(d.host, n);
        this.kick();
      });
    this.inFlight.set(d.id, p);
  }

  /**
   * One attempt, with tracing on a span of the event's trace (the HTTP client
   * span of the POST, and the traceparent header the receiver gets, below it).
   */
  private async attempt(d: Claimed): Promise<void> {
    if (!tracingOn()) {
      await this.send(d);
      return;
    }
    await inSpan(
      `deliver ${d.event}`,
      SpanKind.INTERNAL,
      d.traceparent ? { traceparent: d.traceparent, tracestate: d.tracestate ?? undefined } : undefined,
      { 'lab.webhook.delivery_id': d.id, 'lab.webhook.subscription_id': d.subscription_id, 'lab.webhook.attempt': d.attempts + 1, 'server.address': d.host },
      (span) =>
        this.send(d).then((o) => {
          if (o.status !== undefined) span?.setAttribute('http.response.status_code', o.status);
          if (!o.ok && span) failSpan(span, o.error);
        }),
    );
  }

  /**
   * Sends and records one attempt: the envelope is serialised once and those
   * exact bytes are signed (now, by the subscription's scheme) and sent; the
   * delivery id is the same on every attempt and redelivery (X-Service-Delivery,
   * and webhook-id under Standard Webhooks).
   */
  private async send(d: Claimed): Promise<SendOutcome> {
    const deliveredAt = new Date().toISOString();
    const body = Buffer.from(
      `{"id":${JSON.stringify(d.id)},"event":${JSON.stringify(d.event)},"org_id":${JSON.stringify(d.org_id)},"delivered_at":${JSON.stringify(deliveredAt)},"data":${d.data}}`,
    );
    const outcome = await postOnce({
      url: d.url,
      body,
      timeoutMs: this.cfg.timeoutMs,
      allowPrivate: this.cfg.allowPrivateNetworks,
      headers: {
        'Content-Type': 'application/json',
        'User-Agent': USER_AGENT,
        'X-Service-Event': d.event,
        'X-Service-Delivery': d.id,
        ...signatureHeaders({ scheme: d.signature_scheme, id: d.id, secrets: d.previous_secret ? [d.secret, d.previous_secret] : [d.secret], body }),
      },
    });
    await this.record(d, outcome);
    return outcome;
  }

  private async record(d: Claimed, o: SendOutcome): Promise<void> {
    const attempts = d.attempts + 1;
    const code = o.status ?? null;
    if (o.ok) return this.recorder.add({ id: d.id, ok: true, attempts, code, error: null, delay_ms: null });
    // A refused or failed attempt (the receiver's answer, a timeout, an address the
    // guard refuses) is the integrator's to fix, not an outage: at debug level,
    // so an operator can turn it on and answer "why did my webhook not arrive".
    this.log.debug(
      {
        delivery_id: d.id,
        subscription_id: d.subscription_id,
        org_id: d.org_id,
        host: d.host,
        attempt: attempts,
        status: code,
        error: o.error,
        will_retry: o.retry && attempts < this.cfg.maxAttempts,
      },
      `webhook delivery attempt failed: ${o.error}`,
    );
    if (o.retry && attempts < this.cfg.maxAttempts) {
      return this.recorder.add({ id: d.id, ok: false, attempts, code, error: o.error, delay_ms: retryDelay(this.cfg, attempts) });
    }
    // the last failure and a possible auto-disable (audited) commit together
    await this.outbox.write(null, async (tx, emit) => {
      await tx.execute(sql`update webhooks.deliveries
          set status = 'failed', attempts = ${attempts}, last_status_code = ${code}, last_error = ${o.error},
              failed_at = now(), next_attempt_at = null
          where id = ${d.id}::uuid and status = 'pending'`);
      await disableIfFailing(tx, emit, this.cfg, d.org_id, d.subscription_id);
    });
  }

  /** Stops claiming and lets the attempts in flight finish and be recorded (each is bounded by the timeout). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.claimer.stop();
    await Promise.allSettled([...this.inFlight.values()]);
  }
}
