import { EVENT_ROUTES } from '@lab/contracts';
import { sql } from 'drizzle-orm';
import {
  activeTraceCarrier,
  errText,
  tracingOn,
  metrics,
  newId,
  rows,
  type BusMessage,
  type Database,
  type Logger,
  type ServiceDeps,
  type Executor,
  type TraceCarrier,
} from '@lab/kit';
import { subscribed } from './event-filters.js';

/** The durable queue of the fan-out (prefixed with the exchange by the bus). */
const FANOUT_QUEUE = EVENT_ROUTES.webhookDeliveries.queue;

/**
 * Unacknowledged events the broker hands over at once, and so the largest
 * fan-out batch: one transaction for up to this many events.
 */
const FANOUT_PREFETCH = 128;

/**
 * One delivery row per active subscription of each event's organisation that
 * names the event, written by one statement together with the events' inbox
 * ids: once a message is acknowledged its deliveries are stored, and a
 * redelivered message (its id already in the inbox) adds none; events with
 * no delivery to store leave no inbox row (nothing to add twice). The
 * subscriptions are read first, outside that statement, as a read-committed
 * transaction would have read them anyway; one deleted in between fails the
 * statement (foreign key) and the events are tried again. Returns the number
 * of delivery rows stored.
 */
async function fanOut(db: Executor, msgs: BusMessage[], traces?: readonly (TraceCarrier | undefined)[]): Promise<number> {
  if (!msgs.length) return 0;
  const orgs = [...new Set(msgs.filter((m) => m.org_id).map((m) => m.org_id!))];
  const subs = orgs.length
    ? await rows<{ id: string; org_id: string; url: string; events: string[] }>(
        db,
        sql`select id::text, org_id::text, url, events from webhooks.subscriptions
            where org_id in (${sql.join(
              orgs.map((o) => sql`${o}::uuid`),
              sql`, `,
            )}) and active`,
      )
    : [];
  const byOrg = new Map<string, { id: string; host: string; events: string[] }[]>();
  for (const s of subs) {
    const list = byOrg.get(s.org_id) ?? [];
    list.push({ id: s.id, host: new URL(s.url).host, events: s.events });
    byOrg.set(s.org_id, list);
  }
  const deliveries: Record<string, unknown>[] = [];
  for (const [i, m] of msgs.entries()) {
    // the trace the event's handling is part of, continued by the delivery's attempts
    const trace = traces?.[i];
    for (const s of (m.org_id && byOrg.get(m.org_id)) || []) {
      if (!subscribed(s.events, m.type)) continue;
      deliveries.push({ id: newId(), org_id: m.org_id, subscription_id: s.id, event_id: m.id, event: m.type, data: m.data ?? {}, host: s.host, ...trace });
    }
  }
  // No delivery to store: nothing for a redelivery to add twice, so no inbox row
  // either (most events: their organisation subscribes to none of them).
  if (!deliveries.length) return 0;
  // One statement, so atomic without a transaction around it. The rows travel
  // as one JSON parameter: events times subscriptions can pass the 65,535 bind
  // parameters of a VALUES list.
  const [r] = await rows<{ fresh: number; stored: number }>(
    db,
    sql`with ins as (
          insert into webhooks.inbox (id)
          select distinct e::uuid from json_array_elements_text(${JSON.stringify(msgs.map((m) => m.id))}::json) as e
          on conflict do nothing returning id
        ), del as (
          insert into webhooks.deliveries (id, org_id, subscription_id, event_id, event, data, host, next_attempt_at, traceparent, tracestate)
          select v.id, v.org_id, v.subscription_id, v.event_id, v.event, v.data, v.host, now(), v.traceparent, v.tracestate
          from json_to_recordset(${JSON.stringify(deliveries)}::json)
               as v(id uuid, org_id uuid, subscription_id uuid, event_id uuid, event text, data jsonb, host text, traceparent text, tracestate text)
          where v.event_id in (select id from ins)
          on conflict (subscription_id, event_id) do nothing
          returning 1
        )
        select (select count(*) from ins)::int as fresh, (select count(*) from del)::int as stored`,
  );
  const distinct = new Set(msgs.map((m) => m.id)).size;
  if (r!.fresh < distinct) metrics().consumed.inc({ queue: FANOUT_QUEUE, outcome: 'duplicate' }, distinct - r!.fresh);
  return r!.stored;
}

/**
 * Takes the events off the bus in batches: the events that arrive while one
 * batch is stored form the next, so under load two statements serve many
 * events instead of a five-round-trip transaction each, and a lone event still
 * goes at once. A message is acknowledged only after the statement storing its
 * deliveries commits. When a batch fails, its events are tried one by one, so
 * a message that cannot be stored fails (and is retried, then parked by the
 * bus) alone.
 */
class FanOutBatcher {
  private queue: { msg: BusMessage; trace?: TraceCarrier; done: (err?: unknown) => void }[] = [];
  private running = false;

  constructor(
    private readonly db: Database,
    private readonly log: Logger,
    private readonly onStored: () => void,
  ) {}

  /** `trace`: the context of the message's handling (its consumer span), kept with its deliveries. */
  add(msg: BusMessage, trace?: TraceCarrier): Promise<void> {
    return new Promise((resolve, reject) => {
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- passes on what the batch's write threw
      this.queue.push({ msg, trace, done: (err) => (err === undefined ? resolve() : reject(err)) });
      if (!this.running) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.running = true;
    while (this.queue.length) {
      const batch = this.queue.splice(0, FANOUT_PREFETCH);
      try {
        const stored = await fanOut(
          this.db.orm,
          batch.map((b) => b.msg),
          tracingOn() ? batch.map((b) => b.trace) : undefined,
        );
        for (const b of batch) b.done();
        if (stored > 0) this.onStored();
        continue;
      } catch (err) {
        if (batch.length === 1) {
          batch[0]!.done(err);
          continue;
        }
        this.log.warn({ err: errText(err), events: batch.length }, 'webhook fan-out batch failed; storing its events one by one');
      }
      for (const b of batch) {
        try {
          const stored = await fanOut(this.db.orm, [b.msg], [b.trace]);
          b.done();
          if (stored > 0) this.onStored();
        } catch (err) {
          b.done(err);
        }
      }
    }
    this.running = false;
  }
}

export async function consumeEvents(deps: ServiceDeps, onStored: () => void): Promise<void> {
  const batcher = new FanOutBatcher(deps.db, deps.log, onStored);
  await deps.bus.subscribe({
    ...EVENT_ROUTES.webhookDeliveries,
    prefetch: FANOUT_PREFETCH,
    handler: (msg) => batcher.add(msg, activeTraceCarrier()),
    // the in-process bus hands over a relay batch at once: stored by one statement
    handleBatch: async (msgs) => {
      if ((await fanOut(deps.db.orm, msgs)) > 0) onStored();
    },
  });
}
