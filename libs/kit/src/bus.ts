import { connect, type Channel, type ChannelModel, type ConfirmChannel, type ConsumeMessage, type Options, type RecoveringChannelModel } from 'amqplib';
import { randomUUID } from 'node:crypto';
import type { Logger } from './logger.js';
import { metrics } from './metrics.js';
import { OutageLog } from './outage-log.js';
import { utf8Concat } from './utf8.js';
import { corkMultiplexerPasses } from './adapters/amqplib.js';
import { DomainError, isTransientFailure } from './errors.js';
import { inSpan, SpanKind, tracingOn, withTraceContext, type TraceCarrier } from './tracing.js';

/**
 * The envelope of every message on the bus: domain events (<resource>.created),
 * audit records (audit.record) and internal notices (identity.token.revoked).
 */
export interface BusMessage<T = unknown> {
  /** unique id; consumers drop duplicates by it */
  id: string;
  /** routing key, e.g. "<resource>.created" */
  type: string;
  org_id: string | null;
  occurred_at: string;
  request_id?: string;
  data: T;
}

export interface SubscribeOptions {
  /** durable queue name; with `transient`, a prefix for a private auto-deleted queue */
  queue: string;
  /** topic patterns bound on the events exchange ("<resource>.*", "audit.#") */
  bindings: readonly string[];
  handler: (msg: BusMessage) => Promise<void>;
  prefetch?: number;
  /** private, auto-deleted queue for this process (cache invalidation and the like) */
  transient?: boolean;
  /** attempts before a message is parked in `<queue>.dlq` */
  maxAttempts?: number;
  /**
   * Handles several messages at once, all or nothing (one transaction): the
   * in-process bus hands a relay batch over this way, and falls back to
   * `handler`, one message at a time, when it fails. From RabbitMQ, a bundle's
   * messages come this way (BUNDLE_CONTENT_TYPE); single messages go to `handler`.
   */
  handleBatch?: (msgs: BusMessage[]) => Promise<void>;
}

/**
 * A message of a publish that the bus did not take, while the rest of the batch
 * was taken: a broker's negative confirm, or (in-process) a consumer that failed
 * on it. A publish that fails as a whole (no broker, channel lost) throws instead.
 */
export interface Refusal {
  id: string;
  error: string;
  /** a dependency away for now: retried without counting toward setting the message aside */
  transient?: boolean;
  /** the consumer (queue) that gave up on it after its last attempt: set aside, not retried */
  deadFor?: string;
}

/** What a publish did not deliver; every message not named here was taken. */
export interface PublishOutcome {
  refused: Refusal[];
}

/** A message already written as JSON (the outbox's text), with what routing needs. */
export interface SerializedMessage {
  id: string;
  type: string;
  request_id?: string;
  /** the whole BusMessage as JSON; with `count`, a JSON array of `count` whole messages (an outbox row of several) */
  body: string;
  /** the trace context the message continues (the RabbitMQ instrumentation sends it on in the headers) */
  trace?: TraceCarrier;
  /**
   * Set when body holds several messages of `type`: sent as it is as one bundle
   * when the bus bundles the type, else one by one; either way a refusal of any
   * of them is the refusal of `id`.
   */
  count?: number;
}

export interface Bus {
  /**
   * Resolves once the broker has confirmed (or refused, one by one) every
   * message; rejects when the batch could not be handed over at all.
   * `traces[i]`, when given, is the trace context message i continues.
   */
  publish(messages: BusMessage[], traces?: readonly (TraceCarrier | undefined)[]): Promise<PublishOutcome | void>;
  subscribe(opts: SubscribeOptions): Promise<void>;
  readonly connected: boolean;
  /** Calls `listener` each time the bus (re)connects: a backlog can go out at once. */
  onConnected?(listener: () => void): void;
  /**
   * publish() for messages already written as JSON, sent as they are (a broker in
   * another process): the outbox relay then neither parses nor rewrites them.
   */
  publishSerialized?(messages: SerializedMessage[]): Promise<PublishOutcome | void>;
  /**
   * Whether publish hands messages to consumers in this very process, which may
   * write to the same database before it resolves: the outbox relay must then not
   * hold a transaction (or, on PGlite, the one connection) open while it publishes.
   */
  readonly deliversInProcess: boolean;
  close(): Promise<void>;
}

/**
 * A bus whose publishes wait until `open()`. Services started one after another
 * in one process (the standalone) each start their outbox relay at once: events
 * left over from before a restart would otherwise be published before the
 * services started later had subscribed, and so reach no one (in-process) or no
 * queue (RabbitMQ), and be deleted as sent. Subscriptions pass at once.
 */
export function heldUntilOpen(bus: Bus): Bus & { open(): void } {
  // Only an in-process bus is held. RabbitMQ keeps early events in the queues every
  // process declares; holding there would keep the relay's transaction open past
  // its publish timeout, and the held publish would go out after the retry too.
  if (!bus.deliversInProcess) return Object.assign(bus, { open: () => undefined });
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return {
    publish: async (messages, traces) => {
      await opened;
      return bus.publish(messages, traces);
    },
    subscribe: (opts) => bus.subscribe(opts),
    get connected() {
      return bus.connected;
    },
    onConnected: (listener) => bus.onConnected?.(listener),
    deliversInProcess: bus.deliversInProcess,
    close: () => {
      // nothing may wait on a bus that is closing: the publishes fail instead
      open();
      return bus.close();
    },
    open,
  };
}

/** AMQP topic matching: `*` is exactly one word, `#` zero or more. */
export function topicMatches(pattern: string, key: string): boolean {
  const p = pattern.split('.');
  const k = key.split('.');
  const walk = (i: number, j: number): boolean => {
    if (i === p.length) return j === k.length;
    if (p[i] === '#') return walk(i + 1, j) || (j < k.length && walk(i, j + 1));
    if (j === k.length) return false;
    return (p[i] === '*' || p[i] === k[j]) && walk(i + 1, j + 1);
  };
  return walk(0, 0);
}

/** Records how long after it occurred a consumer got to a message. */
function observeLag(queue: string, msg: BusMessage): void {
  const at = Date.parse(msg.occurred_at);
  if (Number.isFinite(at)) metrics().consumeLag.observe({ queue }, Math.max(0, (Date.now() - at) / 1000));
}

/** Delay before retry n (1-based): exponential with jitter, capped. */
export function retryDelayMs(attempt: number, baseMs = 500, capMs = 30_000): number {
  const exp = Math.min(capMs, baseMs * 2 ** (attempt - 1));
  return Math.round(exp / 2 + Math.random() * (exp / 2));
}

const ATTEMPT_HEADER = 'x-lab-attempt';
/** Retries of a message after transient failures (they do not count as attempts, but lengthen the delay). */
const WAITS_HEADER = 'x-lab-waits';
/**
 * Transient failures of one message after which it is parked all the same: a
 * day at the 30-second cap. An outage ends well before; an error wrongly taken
 * for transient (a setting missing, a call that always times out) must not cycle
 * one message through its retry queue forever.
 */
export const MAX_TRANSIENT_WAITS = 2_880;

/**
 * The RabbitMQ queue type of the durable queues and their `.retry` and `.dlq`:
 * quorum (replicated over the cluster's nodes, survives the loss of a minority of
 * them) or classic (on one node: lost with it). Private transient queues are
 * always classic.
 */
export const BUS_QUEUE_TYPES = ['quorum', 'classic'] as const;
export type BusQueueType = (typeof BUS_QUEUE_TYPES)[number];

/**
 * Times a message may come back to its quorum queue unsettled before the broker
 * moves it to `.dlq` (x-delivery-limit, dead-lettered). The bus never requeues a message
 * (a failure goes through `.retry`, confirmed before the ack), so only a message
 * returned unacked counts: its consumer's channel or connection lost mid-handling,
 * a process that crashes on it. Explicit, with a dead-letter route: RabbitMQ 4
 * applies 20 by default and drops a message past it when the queue has no such
 * route; 3.x has no limit (a message that crashes its consumer would loop
 * forever); and -1, "no limit" on 4.x, drops a message at its first return on 3.x.
 */
export const QUORUM_DELIVERY_LIMIT = 20;

/**
 * Headers the broker sets on a delivery or a dead-lettering, removed from the
 * copy sent to `.retry`: RabbitMQ (3.x) drops a message dead-lettered into a
 * queue its `x-death` already names, unless a rejection is on the way, so a
 * message once parked by the delivery limit, moved back by an operator and
 * failing again would be silently lost between `.retry` and the queue.
 */
const BROKER_HEADERS = ['x-death', 'x-first-death-reason', 'x-first-death-queue', 'x-first-death-exchange', 'x-delivery-count'];

/**
 * The arguments of a durable queue Q (`main`), `Q.retry` and `Q.dlq`: the same in
 * every process, or RabbitMQ refuses the declaration. Classic ones are those of
 * the queues declared before the type was configurable (plus the explicit type,
 * which RabbitMQ finds equivalent), so an existing classic deployment declares
 * exactly what it has.
 */
export function durableQueueArguments(type: BusQueueType, queue: string, role: 'main' | 'retry' | 'dlq', expiresMs?: number): Record<string, unknown> {
  const args: Record<string, unknown> = { 'x-queue-type': type };
  // at-least-once dead-lettering: the broker keeps the message in the source queue
  // until the target confirmed it (the default, at-most-once, may lose it on the
  // way); it needs reject-publish overflow, inert here since no length is limited
  const safeDeadLetters = type === 'quorum' ? { 'x-dead-letter-strategy': 'at-least-once', 'x-overflow': 'reject-publish' } : {};
  if (role === 'main') {
    // only the main queue may expire: nothing consumes .retry and .dlq, and
    // publishing is no use, so an expiry would delete them with messages in them
    if (expiresMs) args['x-expires'] = expiresMs;
    if (type === 'quorum') {
      Object.assign(args, {
        'x-delivery-limit': QUORUM_DELIVERY_LIMIT,
        'x-dead-letter-exchange': '',
        'x-dead-letter-routing-key': `${queue}.dlq`,
        ...safeDeadLetters,
      });
    }
  } else if (role === 'retry') {
    // per-message TTL (the retry delay), then back to the queue
    Object.assign(args, { 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': queue, ...safeDeadLetters });
  }
  return args;
}

/** Whether an error is the broker refusing a declaration that differs from the existing entity (406). */
function isPreconditionFailed(err: unknown): boolean {
  return (err as { code?: unknown } | null | undefined)?.code === 406;
}

/**
 * A channel for declarations, replaced when a refused one (PRECONDITION_FAILED)
 * has made the broker close it.
 */
class DeclareChannel {
  private ch?: Channel;

  constructor(private readonly model: ChannelModel) {}

  async get(): Promise<Channel> {
    if (!this.ch) {
      const ch = await this.model.createChannel();
      // a refused declaration closes the channel with an error event: without a
      // listener it would be thrown; the declaration's own promise reports it
      ch.on('error', () => undefined);
      ch.on('close', () => {
        if (this.ch === ch) this.ch = undefined;
      });
      this.ch = ch;
    }
    return this.ch;
  }

  /** The channel, unless a failed operation closed it (its close event may come later). */
  discard(): void {
    this.ch = undefined;
  }

  async close(): Promise<void> {
    const ch = this.ch;
    this.ch = undefined;
    await ch?.close().catch(() => undefined);
  }
}

export interface AmqpBusOptions {
  /** delete this process's durable queues after this long unused (test stacks) */
  queueExpiresMs?: number;
  /**
   * Type of the durable queues (default quorum; classic for a single-node broker).
   * A queue that already exists as the other type is used as it is, with a warning.
   */
  queueType?: BusQueueType;
  /**
   * Durable queues to declare (with their retry and dead-letter queues and their
   * bindings) on every connect, whether or not this process consumes them: the
   * deployment's whole list (contracts' DURABLE_QUEUES), so an event published
   * before its consumer first started is kept rather than routed to no queue.
   */
  declare?: readonly { queue: string; bindings: readonly string[] }[];
  /** confirm channels publishes are spread over (default 3, as many as the outbox relay's batches in flight) */
  publishChannels?: number;
  /**
   * Message types published in bundles, as binding patterns (`audit.record`,
   * `sample.#`): the messages of such a type in one publish go to the broker as
   * one AMQP message a type (see BUNDLE_CONTENT_TYPE). Every consumer of these
   * types must run a bus that reads bundles (this one).
   */
  bundledTypes?: readonly string[];
}

/**
 * The content type of a bundle: a JSON array of whole messages, published as one
 * AMQP message under their common type. RabbitMQ's cost is per message (routing,
 * the quorum queue's log entry, the confirm, the delivery and its ack): for a
 * kind of message written beside every change and consumed in batches anyway
 * (audit records), one bundle per relay batch takes most of it away. A consumer
 * hands a bundle's messages to its handleBatch (else one by one) and acks it once;
 * if they fail, each goes to the retry queue on its own, so one message that
 * keeps failing is set aside alone.
 */
export const BUNDLE_CONTENT_TYPE = 'application/vnd.lab.bundle+json';

/** The AMQP properties of one message as the bus publishes it (apart from a bundle). */
function messageProperties(m: { id: string; request_id?: string }) {
  return {
    persistent: true,
    messageId: m.id,
    contentType: 'application/json',
    headers: m.request_id ? { 'x-request-id': m.request_id } : undefined,
  };
}

/**
 * The messages one AMQP message of the bus carries (as amqplib hands it over):
 * itself, or a bundle's. Throws on content that is not JSON, or a bundle that is
 * not an array. For consumers outside the bus too (tools, tests reading a
 * queue), so the format is read in one place.
 */
export function messagesIn(raw: Pick<ConsumeMessage, 'content' | 'properties'>): BusMessage[] {
  const parsed = JSON.parse(raw.content.toString('utf8')) as unknown;
  if (raw.properties.contentType !== BUNDLE_CONTENT_TYPE) return [parsed as BusMessage];
  if (!Array.isArray(parsed)) throw new Error('a bundle that is not a JSON array');
  return parsed as BusMessage[];
}

/**
 * A bundle is closed at this many characters of its messages' JSON and the next
 * begins: far below the broker's largest message (RabbitMQ 4 refuses over 16 MiB
 * by closing the channel, which would fail every publish of the batch, and again
 * on each retry), and enough for hundreds of audit records.
 */
const BUNDLE_MAX_CHARS = 1024 * 1024;

/**
 * Runs an ack, nack or send on a consumer's channel; false when the channel is
 * gone. amqplib makes every operation of a closed channel throw at once (the
 * connection dropped, the broker restarted or closed the channel) while a
 * handler was still running: its message is unacked, so the broker delivers it
 * again, and the inbox makes the second handling harmless. Thrown out of a
 * consumer, it would be an unhandled rejection and end the process.
 */
function onOpenChannel(op: () => unknown): boolean {
  try {
    op();
    return true;
  } catch {
    return false;
  }
}

/**
 * RabbitMQ bus: topic exchange, publisher confirms, manual acks, and for every
 * durable queue Q a retry queue `Q.retry` (per-message TTL, dead-letters back to
 * Q) and a dead-letter queue `Q.dlq` for messages that keep failing, quorum
 * queues by default (replicated: a broker node lost takes no queue and no message
 * with it), with at-least-once dead-lettering between them. Reconnects with
 * backoff and re-creates channels and consumers after each reconnect.
 */
export class AmqpBus implements Bus {
  private model?: RecoveringChannelModel;
  /** the connection's current channel model (a new one after each reconnect) */
  private current?: ChannelModel;
  /** the confirm channels publishes go through, taken in turn (a slot is empty while its channel reopens) */
  private channels: (ConfirmChannel | undefined)[] = [];
  private nextChannel = 0;
  private readonly subscriptions: SubscribeOptions[] = [];
  /** queues found to exist with other arguments, each warned about once */
  private readonly otherTypeWarned = new Set<string>();
  private closing = false;
  private readonly connectedListeners: (() => void)[] = [];
  /** whether each type seen is bundled (bundledTypes' patterns, matched once per type) */
  private readonly bundledByType = new Map<string, boolean>();
  readonly deliversInProcess = false;

  private constructor(
    private readonly url: string,
    private readonly exchange: string,
    private readonly log: Logger,
    private readonly opts: AmqpBusOptions,
  ) {
    this.outages = new OutageLog(log);
  }
  /** handlers failing on a database or peer away: logged as outages, not per message */
  private readonly outages: OutageLog;

  static async connect(url: string, exchange: string, log: Logger, opts: AmqpBusOptions = {}): Promise<AmqpBus> {
    const bus = new AmqpBus(url, exchange, log, opts);
    await bus.start();
    return bus;
  }

  get connected(): boolean {
    return this.channels.some(Boolean);
  }

  private async start(): Promise<void> {
    this.model = await connect(this.url, {
      recovery: { initialDelay: 200, maxDelay: 5_000, initialMaxRetries: 20, setup: (m: ChannelModel) => this.setup(m) },
    });
    this.model.on('disconnect', (err: Error) => {
      this.channels = [];
      this.current = undefined;
      if (!this.closing) this.log.warn({ err: (err as Error | undefined)?.message }, 'bus disconnected, reconnecting');
    });
    this.model.on('error', (err: Error) => this.log.warn({ err: err.message }, 'bus error'));
  }

  private async setup(model: ChannelModel): Promise<void> {
    this.current = model;
    // one writev per multiplexer pass (adapters/amqplib.ts, decision 055)
    corkMultiplexerPasses(model);
    const channels: ConfirmChannel[] = [];
    for (let slot = 0; slot < Math.max(1, this.opts.publishChannels ?? 3); slot++) channels.push(await this.publishChannel(model, slot));
    const declaring = new DeclareChannel(model);
    try {
      for (const route of this.opts.declare ?? []) await this.declareDurable(declaring, route.queue, route.bindings);
    } finally {
      await declaring.close();
    }
    for (const sub of this.subscriptions) await this.consume(model, sub);
    this.channels = channels;
    this.log.info({ exchange: this.exchange }, 'bus connected');
    this.notifyConnected();
  }

  onConnected(listener: () => void): void {
    this.connectedListeners.push(listener);
  }

  private notifyConnected(): void {
    for (const listener of this.connectedListeners) {
      try {
        listener();
      } catch (err) {
        this.log.warn({ err }, 'bus connected listener failed');
      }
    }
  }

  /**
   * A confirm channel publishes go through (slot `slot` of several: a channel is
   * one process in the broker, which routes and confirms its messages one after
   * another, so batches published at once go faster on channels of their own).
   * The broker may close a channel while the connection stays up (a message it
   * refuses, a deleted exchange): the connection's recovery would never notice,
   * and every publish after would fail `bus_unavailable` until a restart. So a
   * channel closed that way is replaced.
   */
  private async publishChannel(model: ChannelModel, slot: number): Promise<ConfirmChannel> {
    const ch = await model.createConfirmChannel();
    ch.on('error', (err: Error) => this.log.warn({ err: err.message }, 'bus channel error'));
    ch.on('close', () => {
      if (this.channels[slot] !== ch) return;
      this.channels[slot] = undefined;
      if (!this.closing)
        this.reopenLater(model, 'publish channel', async () => {
          this.channels[slot] = await this.publishChannel(model, slot);
          this.notifyConnected();
        });
    });
    await ch.assertExchange(this.exchange, 'topic', { durable: true });
    return ch;
  }

  /**
   * Runs `reopen` after a moment, unless the bus is closing or the connection it
   * belonged to is gone (the connection's recovery then sets everything up
   * again). A failure is retried, less often each time.
   */
  private reopenLater(model: ChannelModel, what: string, reopen: () => Promise<void>, delayMs = 500): void {
    setTimeout(() => {
      if (this.closing || this.current !== model) return;
      reopen().then(
        () => this.log.info({ what }, 'bus channel reopened'),
        (err: unknown) => {
          this.log.warn({ err: (err as Error | undefined)?.message, what }, 'bus channel not reopened yet');
          this.reopenLater(model, what, reopen, Math.min(delayMs * 2, 10_000));
        },
      );
    }, delayMs).unref();
  }

  async publish(messages: BusMessage[], traces?: readonly (TraceCarrier | undefined)[]): Promise<PublishOutcome> {
    return this.publishSerialized(messages.map((m, i) => ({ id: m.id, type: m.type, request_id: m.request_id, body: JSON.stringify(m), trace: traces?.[i] })));
  }

  /**
   * Publishes with a confirm callback per message: a negative confirm refuses
   * that message alone (the relay keeps it and sends the rest on), while a
   * channel or connection lost before every confirm came fails the whole batch,
   * which is then the broker's state, not the messages'. The bodies are sent as
   * given (the outbox's JSON text): not parsed and written again.
   */
  async publishSerialized(given: SerializedMessage[]): Promise<PublishOutcome> {
    const { messages, of } = this.unpacked(given);
    const ch = this.takeChannel();
    if (!ch) throw DomainError.unavailable('message bus not connected', 'bus_unavailable');
    // one promise for the batch, settled by the last confirm (a promise per
    // message was a good part of the relay's garbage)
    const errors = new Array<Error | undefined>(messages.length);
    const sends = this.sendsOf(messages);
    let pending = sends.length;
    let settle!: () => void;
    const confirmed = new Promise<void>((resolve) => (settle = resolve));
    const timestamp = Math.floor(Date.now() / 1000);
    try {
      for (const members of sends) {
        const m = messages[members[0]!]!;
        // several messages given as one (count), or several of the publish
        const bundle = members.length > 1 || m.count !== undefined;
        // a bundle of up to a megabyte is never one string (utf8Concat)
        const body = members.length > 1 ? utf8Concat([...members.map((i, k) => (k ? ',' : '[') + messages[i]!.body), ']']) : Buffer.from(m.body);
        const options = bundle ? { persistent: true, messageId: m.id, contentType: BUNDLE_CONTENT_TYPE, timestamp } : { ...messageProperties(m), timestamp };
        const confirmed = (err: unknown) => {
          if (err) for (const i of members) errors[i] = err as Error;
          if (--pending === 0) settle();
        };
        // in the trace of the write that stored the message: the publish span, and
        // the context the headers carry to the consumer, belong to it
        if (m.trace) withTraceContext(m.trace, () => ch.publish(this.exchange, m.type, body, options, confirmed));
        else ch.publish(this.exchange, m.type, body, options, confirmed);
      }
    } catch (err) {
      // a channel that closed under the loop throws on the next publish
      throw DomainError.unavailable(`message bus channel lost: ${(err as Error | undefined)?.message}`, 'bus_unavailable');
    }
    if (sends.length) await confirmed;
    const refused = new Map<string, Refusal>();
    for (const [i, err] of errors.entries()) {
      if (!err) continue;
      if (!/nack/i.test(err.message)) throw DomainError.unavailable(`message bus lost before confirming: ${err.message}`, 'bus_unavailable');
      const id = of ? given[of[i]!]!.id : messages[i]!.id;
      refused.set(id, { id, error: 'refused by the broker (negative confirm)' });
    }
    return { refused: [...refused.values()] };
  }

  /** Whether messages of this type go in bundles (bundledTypes). */
  private bundles(type: string): boolean {
    let yes = this.bundledByType.get(type);
    if (yes === undefined) {
      yes = (this.opts.bundledTypes ?? []).some((pattern) => topicMatches(pattern, type));
      // types come from the code, not from requests: the map stays as small as their list
      this.bundledByType.set(type, yes);
    }
    return yes;
  }

  /**
   * The messages of a publish one by one where they came several as one (count)
   * of a type this bus does not bundle; `of`, then, the given message each is of.
   */
  private unpacked(given: SerializedMessage[]): { messages: SerializedMessage[]; of?: number[] } {
    if (!given.some((m) => m.count !== undefined && !this.bundles(m.type))) return { messages: given };
    const messages: SerializedMessage[] = [];
    const of: number[] = [];
    given.forEach((m, i) => {
      if (m.count === undefined || this.bundles(m.type)) {
        messages.push(m);
        of.push(i);
        return;
      }
      for (const x of JSON.parse(m.body) as BusMessage[]) {
        messages.push({ id: x.id, type: x.type, request_id: x.request_id, body: JSON.stringify(x), trace: m.trace });
        of.push(i);
      }
    });
    return { messages, of };
  }

  /**
   * The AMQP messages a publish sends, each as the indices of the messages it
   * carries: one per message, but one per bundled type for its messages, up to
   * BUNDLE_MAX_CHARS a bundle (a traced message goes alone, in its own trace), in
   * the order of their first.
   */
  private sendsOf(messages: SerializedMessage[]): number[][] {
    if (!this.opts.bundledTypes?.length) return messages.map((_, i) => [i]);
    const sends: number[][] = [];
    const open = new Map<string, { members: number[]; chars: number }>();
    for (const [i, m] of messages.entries()) {
      // a message that is a bundle already (count) goes as it is
      if (m.trace || m.count !== undefined || !this.bundles(m.type)) {
        sends.push([i]);
        continue;
      }
      const bundle = open.get(m.type);
      if (bundle && bundle.chars + m.body.length <= BUNDLE_MAX_CHARS) {
        bundle.members.push(i);
        bundle.chars += m.body.length;
      } else {
        const members = [i];
        open.set(m.type, { members, chars: m.body.length });
        sends.push(members);
      }
    }
    return sends;
  }

  /** The next open publish channel in turn. */
  private takeChannel(): ConfirmChannel | undefined {
    const n = this.channels.length;
    for (let k = 0; k < n; k++) {
      const slot = (this.nextChannel + k) % n;
      const ch = this.channels[slot];
      if (ch) {
        this.nextChannel = slot + 1;
        return ch;
      }
    }
    return undefined;
  }

  async subscribe(opts: SubscribeOptions): Promise<void> {
    this.subscriptions.push(opts);
    // Already connected: consume now (on the connection's own model, which a
    // channel's reopening checks against); otherwise setup() does it on connect.
    if (this.current) await this.consume(this.current, opts);
  }

  private async consume(model: ChannelModel, sub: SubscribeOptions): Promise<void> {
    // a durable queue is declared on a channel of its own, which a refused
    // declaration may close (a queue of the other type, see declareQueue)
    let durable: string | undefined;
    if (!sub.transient) {
      const declaring = new DeclareChannel(model);
      try {
        durable = await this.declareDurable(declaring, sub.queue, sub.bindings);
      } finally {
        await declaring.close();
      }
    }
    const ch = await model.createConfirmChannel();
    ch.on('error', (err: Error) => this.log.warn({ err: err.message, queue: sub.queue }, 'consumer channel error'));
    await ch.assertExchange(this.exchange, 'topic', { durable: true });
    await ch.prefetch(sub.prefetch ?? 20);
    let queue: string;
    if (durable) {
      queue = durable;
    } else {
      // private to this process: classic whatever the setting (a quorum queue can
      // be neither exclusive nor auto-deleted), and explicitly so, should the vhost's
      // default queue type be another
      const q = await ch.assertQueue(`${sub.queue}.${randomUUID()}`, {
        exclusive: true,
        autoDelete: true,
        durable: false,
        arguments: { 'x-queue-type': 'classic' },
      });
      queue = q.queue;
      for (const b of sub.bindings) await ch.bindQueue(queue, this.exchange, b);
    }
    const maxAttempts = sub.maxAttempts ?? 8;
    await ch.consume(queue, (raw: ConsumeMessage | null) => {
      if (!raw) {
        // the broker cancelled the consumer (its queue deleted or moved): the
        // channel goes, and the close below consumes again
        void ch.close().catch(() => undefined);
        return;
      }
      this.handle(ch, queue, sub, raw, maxAttempts).catch((err: unknown) =>
        this.log.error({ err, queue }, 'message settlement failed; the broker redelivers the message'),
      );
    });
    // Closed by the broker with the connection still up (a consumer timeout, say):
    // consume again, or the queue would silently stop being read. Watched only once
    // consuming: a channel lost while being set up fails this call instead, and
    // the one retrying it must be the only one.
    ch.on('close', () => {
      if (!this.closing) this.reopenLater(model, `consumer of ${sub.queue}`, () => this.consume(model, sub));
    });
  }

  /**
   * A durable queue with its retry queue (per-message TTL, dead-letters back) and
   * dead-letter queue, bound to its event types; returns its full name. The same
   * arguments wherever it is declared (durableQueueArguments): RabbitMQ refuses a
   * second declaration that differs.
   */
  private async declareDurable(declaring: DeclareChannel, name: string, bindings: readonly string[]): Promise<string> {
    // Queues are named after the exchange they serve, so two deployments (or two
    // test stacks) on one broker never share a queue.
    const queue = `${this.exchange}.${name}`;
    for (const role of ['main', 'retry', 'dlq'] as const) {
      await this.declareQueue(declaring, queue, role);
    }
    const ch = await declaring.get();
    for (const b of bindings) await ch.bindQueue(queue, this.exchange, b);
    return queue;
  }

  /**
   * Declares one queue of a durable queue's three with the configured type. One
   * that exists with other arguments (a classic queue from before quorum queues
   * were the default, or the reverse) makes RabbitMQ refuse the declaration and
   * close the channel; every process declares every queue, so failing there would
   * keep the whole deployment down. Instead the existing queue is used as it is,
   * with one warning per queue and process naming the queue, what it is and the
   * setting, until an operator migrates it (operations.md).
   */
  private async declareQueue(declaring: DeclareChannel, queue: string, role: 'main' | 'retry' | 'dlq'): Promise<void> {
    const name = role === 'main' ? queue : `${queue}.${role}`;
    const type = this.opts.queueType ?? 'quorum';
    const expires = this.opts.queueExpiresMs;
    let refused: unknown;
    try {
      await (await declaring.get()).assertQueue(name, { durable: true, arguments: durableQueueArguments(type, queue, role, expires) });
      return;
    } catch (err) {
      if (!isPreconditionFailed(err)) throw err;
      declaring.discard();
      refused = err;
    }
    // On a fresh channel: the queue is there (a passive check, which fails if it
    // was deleted since: then the declaration above is worth another try) ...
    try {
      await (await declaring.get()).checkQueue(name);
    } catch (err) {
      declaring.discard();
      if ((err as { code?: unknown } | null | undefined)?.code !== 404) throw err;
      await (await declaring.get()).assertQueue(name, { durable: true, arguments: durableQueueArguments(type, queue, role, expires) });
      return;
    }
    // ... and, as the broker names only the first argument that differs, whether
    // it is exactly what the other type would declare: the queue exists, so this
    // declaration changes nothing, it succeeds or is refused
    const other: BusQueueType = type === 'quorum' ? 'classic' : 'quorum';
    let existing: string;
    try {
      await (await declaring.get()).assertQueue(name, { durable: true, arguments: durableQueueArguments(other, queue, role, expires) });
      existing = other;
    } catch (err) {
      if (!isPreconditionFailed(err)) throw err;
      declaring.discard();
      existing = 'other arguments';
    }
    if (this.otherTypeWarned.has(name)) return;
    this.otherTypeWarned.add(name);
    this.log.warn(
      {
        queue: name,
        existing,
        setting: `LAB_BUS_QUEUE_TYPE=${type}`,
        refused: ((refused as Error | undefined)?.message ?? '').replace(/^.*?(PRECONDITION_FAILED)/, '$1').replace(/"$/, ''),
      },
      existing === other
        ? `queue ${name} exists as a ${other} queue, not the ${type} queue LAB_BUS_QUEUE_TYPE=${type} asks for: used as it is until it is migrated (docs/operations.md)`
        : `queue ${name} exists with other arguments than this process declares (${type}): used as it is; the broker said why`,
    );
  }

  private async handle(ch: ConfirmChannel, queue: string, sub: SubscribeOptions, raw: ConsumeMessage, maxAttempts: number) {
    let msgs: BusMessage[];
    try {
      msgs = messagesIn(raw);
    } catch {
      // Unreadable: nothing will ever handle it, park it at once.
      this.park(ch, queue, sub, raw);
      return;
    }
    if (raw.properties.contentType === BUNDLE_CONTENT_TYPE) {
      await this.handleBundle(ch, queue, sub, raw, msgs);
      return;
    }
    const msg = msgs[0]!;
    let failure: { err: unknown } | undefined;
    try {
      observeLag(sub.queue, msg);
      // with tracing on, in the instrumentation's consumer span, which continues the message's trace
      await sub.handler(msg);
    } catch (err) {
      failure = { err };
    }
    if (!failure) {
      this.outages.success(`${queue} handler dependency`, { queue });
      metrics().consumed.inc({ queue: sub.queue, outcome: 'ok' });
      onOpenChannel(() => ch.ack(raw));
      return;
    }
    const attempt = Number(raw.properties.headers?.[ATTEMPT_HEADER] ?? 1);
    const waits = Number(raw.properties.headers?.[WAITS_HEADER] ?? 0);
    // a database or peer away for now: retried as long as it lasts, not counted
    const transientFailure = isTransientFailure(failure.err);
    // an outage fails every message alike: logged as it starts and ends, not per message
    if (transientFailure) this.outages.failure(`${queue} handler dependency`, failure.err, { queue });
    else this.log.warn({ err: failure.err, queue, type: msg.type, id: msg.id, attempt, transient: false }, 'message handler failed');
    if (sub.transient) {
      onOpenChannel(() => ch.nack(raw, false, false));
      return;
    }
    if (transientFailure ? waits >= MAX_TRANSIENT_WAITS : attempt >= maxAttempts) {
      this.park(ch, queue, sub, raw);
      return;
    }
    // 'wait' (an outage being waited out) apart from 'retry' (the handler's own
    // failure): retries while nothing is down are what an operator must look at
    metrics().consumed.inc({ queue: sub.queue, outcome: transientFailure ? 'wait' : 'retry' });
    // Re-queue through the retry queue with a delay, confirmed before the ack,
    // so a crash in between gives a duplicate (dropped by the inbox), never a loss.
    const headers: Record<string, unknown> = Object.fromEntries(Object.entries(raw.properties.headers ?? {}).filter(([h]) => !BROKER_HEADERS.includes(h)));
    this.forwardThenAck(ch, raw, `${queue}.retry`, [
      {
        content: raw.content,
        properties: {
          ...raw.properties,
          persistent: true,
          expiration: String(retryDelayMs(attempt + waits)),
          headers: {
            ...headers,
            ...(transientFailure ? { [WAITS_HEADER]: waits + 1 } : { [ATTEMPT_HEADER]: attempt + 1 }),
          },
        },
      },
    ]);
  }

  /**
   * A bundle's messages, handled together (handleBatch) or one by one, acked
   * once. If they fail, each goes to the retry queue as a message of its own and
   * is handled alone from there: retried, waited out or set aside on its own
   * count, as if it had never been bundled.
   */
  private async handleBundle(ch: ConfirmChannel, queue: string, sub: SubscribeOptions, raw: ConsumeMessage, msgs: BusMessage[]) {
    try {
      for (const m of msgs) observeLag(sub.queue, m);
      if (sub.handleBatch) await sub.handleBatch(msgs);
      else for (const m of msgs) await sub.handler(m);
    } catch (err) {
      const transientFailure = isTransientFailure(err);
      if (transientFailure) this.outages.failure(`${queue} handler dependency`, err, { queue });
      else this.log.warn({ err, queue, type: raw.fields.routingKey, messages: msgs.length }, 'bundle handler failed; its messages are retried one by one');
      if (sub.transient) {
        onOpenChannel(() => ch.nack(raw, false, false));
        return;
      }
      metrics().consumed.inc({ queue: sub.queue, outcome: transientFailure ? 'wait' : 'retry' }, msgs.length);
      const copies = msgs.map((m) => {
        const own = messageProperties(m);
        return {
          content: Buffer.from(JSON.stringify(m)),
          properties: {
            ...raw.properties,
            ...own,
            expiration: String(retryDelayMs(1)),
            headers: { ...own.headers, ...(transientFailure ? { [WAITS_HEADER]: 1 } : { [ATTEMPT_HEADER]: 2 }) },
          },
        };
      });
      this.forwardThenAck(ch, raw, `${queue}.retry`, copies);
      return;
    }
    this.outages.success(`${queue} handler dependency`, { queue });
    metrics().consumed.inc({ queue: sub.queue, outcome: 'ok' }, msgs.length);
    onOpenChannel(() => ch.ack(raw));
  }

  private park(ch: ConfirmChannel, queue: string, sub: SubscribeOptions, raw: ConsumeMessage) {
    metrics().consumed.inc({ queue: sub.queue, outcome: 'dead' });
    if (sub.transient) {
      onOpenChannel(() => ch.nack(raw, false, false));
      return;
    }
    this.forwardThenAck(ch, raw, `${queue}.dlq`, [{ content: raw.content, properties: { ...raw.properties, persistent: true } }]);
  }

  /** Sends copies of the message to another queue and acks the original once the broker confirmed them. */
  private forwardThenAck(ch: ConfirmChannel, raw: ConsumeMessage, queue: string, copies: { content: Buffer; properties: Options.Publish }[]) {
    if (!onOpenChannel(() => copies.forEach((c) => ch.sendToQueue(queue, c.content, c.properties)))) return;
    ch.waitForConfirms().then(
      () => onOpenChannel(() => ch.ack(raw)),
      () => undefined, // channel gone: the broker redelivers the original
    );
  }

  async close(): Promise<void> {
    this.closing = true;
    await this.model?.close().catch(() => undefined);
    this.channels = [];
  }
}

/**
 * A consumer's handling of a message of the in-process bus, as the RabbitMQ
 * instrumentation shows one (tracing on): a consumer span continuing the trace
 * the message carries, so the handler's statements, calls and log lines belong
 * to the request that wrote it.
 */
function processSpan(queue: string, msg: BusMessage, trace: TraceCarrier, handle: () => Promise<void>): Promise<void> {
  return inSpan(
    `${queue} process`,
    SpanKind.CONSUMER,
    trace,
    // the RabbitMQ instrumentation's attribute names, so one query finds both
    {
      'messaging.system': 'in_process',
      'messaging.operation': 'process',
      'messaging.rabbitmq.routing_key': msg.type,
      'messaging.message_id': msg.id,
    },
    handle,
  );
}

/**
 * In-process bus for the standalone mode: same topic semantics. `publish`
 * resolves only once every matching consumer has handled the message, so the
 * outbox row is deleted only after its effect is stored: a crash in between
 * means a redelivery from the outbox (dropped by the inbox), never a loss.
 *
 * A consumer gets the relay's batch in one call when it can take a batch
 * (`handleBatch`, one transaction); if that fails, one message at a time, so a
 * message that fails holds back no other. A failed message is refused (the relay
 * keeps its row and retries it with backoff); after maxAttempts (or
 * MAX_TRANSIENT_WAITS transient failures) the consumer gives up on it and the
 * refusal says so: the relay moves it to its durable dead-letter table, where an
 * operator lists and replays it. The counts live in memory: after a restart a
 * message gets its attempts again.
 */
export class MemoryBus implements Bus {
  private readonly subs: SubscribeOptions[] = [];
  private readonly failures = new Map<string, number>();
  /** transient failures per message and consumer (capped, see MAX_TRANSIENT_WAITS) */
  private readonly waits = new Map<string, number>();
  readonly connected = true;
  readonly deliversInProcess = true;
  private closed = false;

  /** handlers failing on a database or peer away: logged as outages, not per message */
  private readonly outages: OutageLog;

  constructor(private readonly log: Logger) {
    this.outages = new OutageLog(log);
  }

  async publish(messages: BusMessage[], traces?: readonly (TraceCarrier | undefined)[]): Promise<PublishOutcome> {
    if (this.closed) throw DomainError.unavailable('bus closed', 'bus_unavailable');
    // the trace context of each message, handed to its consumers as RabbitMQ's headers would be
    const traceOf = traces?.length ? new Map(messages.map((m, i) => [m, traces[i]])) : undefined;
    const work: Promise<Refusal[]>[] = [];
    for (const sub of this.subs) {
      const mine = messages.filter((m) => sub.bindings.some((b) => topicMatches(b, m.type)));
      if (mine.length) work.push(this.deliver(sub, mine, traceOf));
    }
    return { refused: (await Promise.all(work)).flat() };
  }

  /**
   * One consumer's messages: the batch at once if it can, else in order, one by
   * one. With tracing on always one by one: each message's handling is then a
   * span in its own trace (a batch's one transaction could be in only one).
   */
  private async deliver(sub: SubscribeOptions, msgs: BusMessage[], traceOf?: Map<BusMessage, TraceCarrier | undefined>): Promise<Refusal[]> {
    if (sub.handleBatch && msgs.length > 1 && !tracingOn()) {
      try {
        for (const msg of msgs) observeLag(sub.queue, msg);
        // copies, so a consumer never shares objects with the publisher
        await sub.handleBatch(JSON.parse(JSON.stringify(msgs)) as BusMessage[]);
        for (const msg of msgs) this.forget(`${sub.queue}|${msg.id}`);
        metrics().consumed.inc({ queue: sub.queue, outcome: 'ok' }, msgs.length);
        return [];
      } catch {
        // one of them (or a dependency) failed: each on its own finds out which
      }
    }
    const refused: Refusal[] = [];
    for (const msg of msgs) {
      const r = await this.deliverOne(sub, msg, traceOf?.get(msg));
      if (r) refused.push(r);
    }
    return refused;
  }

  private forget(key: string): void {
    if (this.failures.size) this.failures.delete(key);
    if (this.waits.size) this.waits.delete(key);
  }

  private async deliverOne(sub: SubscribeOptions, msg: BusMessage, trace?: TraceCarrier): Promise<Refusal | undefined> {
    const key = `${sub.queue}|${msg.id}`;
    try {
      observeLag(sub.queue, msg);
      const copy = JSON.parse(JSON.stringify(msg)) as BusMessage;
      if (trace) await processSpan(sub.queue, msg, trace, () => sub.handler(copy));
      else await sub.handler(copy);
      this.forget(key);
      this.outages.success(`${sub.queue} handler dependency`, { queue: sub.queue });
      metrics().consumed.inc({ queue: sub.queue, outcome: 'ok' });
      return undefined;
    } catch (err) {
      // a database or peer away for now is retried (by the relay) as long as it
      // lasts, without counting toward the attempts after which a message is parked
      const counted = !isTransientFailure(err);
      const attempt = (this.failures.get(key) ?? 0) + (counted ? 1 : 0);
      const waits = (this.waits.get(key) ?? 0) + (counted ? 0 : 1);
      if (counted) this.log.warn({ err, queue: sub.queue, type: msg.type, id: msg.id, attempt, transient: false }, 'message handler failed');
      else this.outages.failure(`${sub.queue} handler dependency`, err, { queue: sub.queue });
      // a private consumer (cache invalidation and the like) is not retried
      if (sub.transient) return undefined;
      const error = (err as Error | undefined)?.message ?? String(err);
      if (attempt >= (sub.maxAttempts ?? 8) || waits >= MAX_TRANSIENT_WAITS) {
        this.forget(key);
        metrics().consumed.inc({ queue: sub.queue, outcome: 'dead' });
        this.log.error({ err, queue: sub.queue, id: msg.id, type: msg.type }, 'message parked after its last attempt');
        return { id: msg.id, error, deadFor: sub.queue };
      }
      if (attempt) this.failures.set(key, attempt);
      if (waits) this.waits.set(key, waits);
      metrics().consumed.inc({ queue: sub.queue, outcome: counted ? 'retry' : 'wait' });
      return { id: msg.id, error, transient: !counted };
    }
  }

  async subscribe(opts: SubscribeOptions): Promise<void> {
    this.subs.push(opts);
  }

  async close(): Promise<void> {
    this.closed = true;
  }
}
