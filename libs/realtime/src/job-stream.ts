import type { ServerResponse } from 'node:http';
import { LRUCache } from 'lru-cache';
import { DomainError, envInt, type Bus, type BusMessage, type Logger } from '@lab/kit';
import { isAdministrator, type Caller } from '@lab/permissions';

/** Comment lines keep proxies and clients from closing an idle stream. */
const HEARTBEAT_MS = 15_000;
/**
 * A client whose unsent output exceeds this is dropped: a stalled reader would
 * otherwise make the gateway buffer every frame for it in memory (Node queues
 * writes without limit). 1 MiB is thousands of job frames, far more than a
 * reading client ever has in flight.
 */
export const MAX_BUFFERED_BYTES = 1024 * 1024;
/**
 * Streams one token may hold open on one gateway at once. A stream is counted
 * once by the rate limit and then stays open, so without a cap one token could
 * hold thousands of sockets (each with its heartbeat) and every event would be
 * offered to all of them. A dashboard needs one; ten leaves room for tabs.
 */
export const MAX_STREAMS_PER_TOKEN = 10;
/**
 * Streams of one organisation on one gateway (`LAB_REALTIME_MAX_STREAMS_PER_ORG`):
 * the token cap alone lets an organisation with many tokens take every socket of
 * a replica, and the other organisations' dashboards with them.
 */
const MAX_STREAMS_PER_ORG = 200;
/** LAB_REALTIME_MAX_STREAMS_PER_ORG, read by the gateway's process and the standalone process. */
export const realtimeStreamsPerOrgSetting = envInt(MAX_STREAMS_PER_ORG, 1, 100_000);
/**
 * Streams of one gateway in all: past this a replica answers 503 (another
 * replica, or this one later, has room) instead of running out of file
 * descriptors, which would take its ordinary requests down too.
 */
const MAX_STREAMS = 5_000;
/** The reconnection delay asked of a stream refused at attach (its caps filled meanwhile). */
const FULL_RETRY_MS = 5_000;
/**
 * How long one stream stays open (give or take a tenth, so streams opened
 * together do not all end together). A stream then ends with a `retry:` hint
 * and the client's EventSource reconnects, maybe to another replica: without an
 * end, streams stay where they first landed after a scale-out and hold a
 * draining replica's sockets until the deploy's grace period cuts them.
 */
const MAX_STREAM_MS = 60 * 60_000;
/** The reconnection delay the ending stream asks for (`retry:`, milliseconds). */
const RECONNECT_MS = 1_000;

/**
 * Who holds a stream, as the runtime authenticated them: the fields of its
 * principal the channel reads (the organisation and token its caps count, and
 * the user, role and scopes of the permission rule). The gateway's principal is one.
 */
export interface StreamPrincipal extends Caller {
  org_id: string;
  token_id: string;
}

interface JobUpdated {
  job: { id: string } & Record<string, unknown>;
  created_by?: string | null;
  created_by_token_id?: string | null;
  /** when the job changed: fixed-width UTC text to the microsecond, so text order is time order */
  updated_at?: string;
}

/** Jobs whose latest update a replica remembers, to hold back older ones that arrive late. */
const REMEMBERED_JOBS = 10_000;

interface Listener {
  principal: StreamPrincipal;
  res: ServerResponse;
  beat?: NodeJS.Timeout;
  expiry?: NodeJS.Timeout;
}

/**
 * Who may see a job: its creator, an administrator of its organisation, an
 * API key without a user for the jobs it created itself, or such a key with the
 * admin scope for all of them (the jobs service applies the same rule).
 */
function maySee(p: StreamPrincipal, orgId: string | null, e: JobUpdated): boolean {
  if (!orgId || p.org_id !== orgId) return false;
  if (isAdministrator(p)) return true;
  return p.user_id ? e.created_by === p.user_id : !!e.created_by_token_id && e.created_by_token_id === p.token_id;
}

export interface JobEventsOptions {
  /** heartbeat interval; tests shorten it */
  heartbeatMs?: number;
  /** lifetime of one stream; tests shorten it */
  maxStreamMs?: number;
  /** streams of one organisation on this gateway (default MAX_STREAMS_PER_ORG) */
  maxPerOrg?: number;
  /** streams on this gateway in all (default MAX_STREAMS) */
  maxStreams?: number;
}

/**
 * The realtime channel background_jobs: one private, auto-deleted queue per
 * gateway replica bound to `job.updated`, fanned out to the replica's connected
 * server-sent-event clients, each getting only the jobs it may see. Clients are
 * kept by organisation, so an event is offered only to its organisation's
 * streams, not to every stream of the replica.
 */
export class JobEventsHub {
  private readonly listeners = new Set<Listener>();
  private readonly byOrg = new Map<string, Set<Listener>>();
  private readonly perToken = new Map<string, number>();
  /** the time of the latest update of each job offered to the streams (see deliver) */
  private readonly latest = new LRUCache<string, string>({ max: REMEMBERED_JOBS });
  private readonly heartbeatMs: number;
  private readonly maxStreamMs: number;
  private readonly maxPerOrg: number;
  private readonly maxStreams: number;

  constructor(
    private readonly log: Logger,
    opts: JobEventsOptions = {},
  ) {
    this.heartbeatMs = opts.heartbeatMs ?? HEARTBEAT_MS;
    this.maxStreamMs = opts.maxStreamMs ?? MAX_STREAM_MS;
    this.maxPerOrg = opts.maxPerOrg ?? MAX_STREAMS_PER_ORG;
    this.maxStreams = opts.maxStreams ?? MAX_STREAMS;
  }

  async subscribe(bus: Bus, queue = 'gateway.job-events'): Promise<void> {
    await bus.subscribe({ queue, transient: true, bindings: ['job.updated'], handler: async (msg) => this.deliver(msg) });
  }

  private deliver(msg: BusMessage): void {
    const e = msg.data as JobUpdated;
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- an event from the bus is checked before it is trusted
    if (!e?.job?.id) return;
    // A job's updates come from the API and from the workers, each publishing from
    // its own outbox, so they may arrive out of order (a worker's `running` before
    // the API's `queued`). A stream shows the job as it is now: an update older than
    // one already offered is not sent, so no status goes back.
    if (typeof e.updated_at === 'string') {
      const last = this.latest.get(e.job.id);
      if (last !== undefined && e.updated_at < last) return;
      this.latest.set(e.job.id, e.updated_at);
    }
    const org = msg.org_id ? this.byOrg.get(msg.org_id) : undefined;
    if (!org) return;
    const frame = `event: job.updated\nid: ${msg.id}\ndata: ${JSON.stringify(e.job)}\n\n`;
    // a copy: send() may drop a listener from the set while it is walked
    for (const l of [...org]) {
      if (maySee(l.principal, msg.org_id, e)) this.send(l, frame);
    }
  }

  /** Forgets a client: no more frames, no more heartbeats, its places given back. */
  private drop(l: Listener): void {
    clearInterval(l.beat);
    clearTimeout(l.expiry);
    if (!this.listeners.delete(l)) return;
    const orgId = l.principal.org_id;
    const org = this.byOrg.get(orgId)!;
    org.delete(l);
    if (!org.size) this.byOrg.delete(orgId);
    const token = l.principal.token_id;
    const n = this.perToken.get(token)! - 1;
    if (n) this.perToken.set(token, n);
    else this.perToken.delete(token);
  }

  /** Why a new stream of this principal may not open now, if it may not. */
  private refusal(principal: StreamPrincipal): DomainError | undefined {
    if ((this.perToken.get(principal.token_id) ?? 0) >= MAX_STREAMS_PER_TOKEN) {
      return new DomainError('rate_limited', 'too_many_streams', `at most ${MAX_STREAMS_PER_TOKEN} realtime streams of one token may be open at once`);
    }
    if ((this.byOrg.get(principal.org_id)?.size ?? 0) >= this.maxPerOrg) {
      return new DomainError(
        'rate_limited',
        'too_many_streams',
        `at most ${this.maxPerOrg} realtime streams of one organisation may be open at once on this server`,
      );
    }
    if (this.listeners.size >= this.maxStreams) {
      return DomainError.unavailable('this server holds as many realtime streams as it can; try again shortly');
    }
    return undefined;
  }

  /**
   * Writes to one client, never to an ended or destroyed response: a write after
   * end() is emitted as an 'error' on the response, which has no listener and
   * would crash the process (seen during the shutdown grace period).
   */
  private send(l: Listener, chunk: string): void {
    const { res } = l;
    if (res.writableEnded || res.destroyed) {
      this.drop(l);
      return;
    }
    if (res.writableLength > MAX_BUFFERED_BYTES) {
      // Destroy rather than end(): end() would queue behind the backlog and keep
      // it in memory for as long as the client stalls.
      this.log.warn({ buffered: res.writableLength }, 'realtime client not reading, dropped');
      this.drop(l);
      res.destroy();
      return;
    }
    res.write(chunk);
  }

  /**
   * Refuses a new stream over a cap: the token's (MAX_STREAMS_PER_TOKEN) or the
   * organisation's on this gateway, 429 too_many_streams; this gateway's in all, 503.
   */
  admit(principal: StreamPrincipal): void {
    const refused = this.refusal(principal);
    if (refused) throw refused;
  }

  /** Serves one client until it disconnects (or the gateway stops). */
  attach(principal: StreamPrincipal, res: ServerResponse): Promise<void> {
    // The client already left: 'close' has fired and will not fire again, so a
    // registered listener and its heartbeat would never be removed.
    if (res.destroyed) return Promise.resolve();
    res.flushHeaders();
    // Admission and attachment are apart by the request's rate-limit count, so
    // concurrent opens can all pass admit(). Checked again here, where taking
    // the place cannot interleave: a stream over a cap ends at once, asking the
    // client to come back later (then admit() answers it properly).
    if (this.refusal(principal)) {
      res.end(`retry: ${FULL_RETRY_MS}\n\n`);
      return Promise.resolve();
    }
    res.write(': connected to background_jobs\n\n');
    const l: Listener = { principal, res };
    this.listeners.add(l);
    let org = this.byOrg.get(principal.org_id);
    if (!org) this.byOrg.set(principal.org_id, (org = new Set()));
    org.add(l);
    this.perToken.set(principal.token_id, (this.perToken.get(principal.token_id) ?? 0) + 1);
    l.beat = setInterval(() => this.send(l, ': heartbeat\n\n'), this.heartbeatMs);
    l.beat.unref();
    l.expiry = setTimeout(
      () => {
        this.send(l, `retry: ${RECONNECT_MS}\n\n`);
        this.drop(l);
        if (!res.writableEnded) res.end();
      },
      this.maxStreamMs * (0.9 + Math.random() * 0.2),
    );
    l.expiry.unref();
    return new Promise<void>((resolve) => {
      res.on('close', () => {
        this.drop(l);
        resolve();
      });
    });
  }

  get size(): number {
    return this.listeners.size;
  }

  /** Ends every stream (gateway stop), so the server can close. */
  close(): void {
    const count = this.listeners.size;
    // Unregister as well as end: 'close' comes only once the client has read the
    // end, and until then events and heartbeats would write after end().
    for (const l of [...this.listeners]) {
      this.drop(l);
      l.res.end();
    }
    this.log.debug({ count }, 'realtime streams closed');
  }
}
