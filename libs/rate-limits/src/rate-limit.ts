import { createHash } from 'node:crypto';
import { isIP } from 'node:net';
import { Redis } from 'ioredis';
import { RateLimiterMemory, RateLimiterRedis, type RateLimiterAbstract } from 'rate-limiter-flexible';
import { DomainError, metrics, OutageLog, type Logger } from '@lab/kit';

/** The counter store's name in the log. */
const STORE = 'rate limit store';

export const DEFAULT_LIMITS = { per_minute: 120, per_hour: 5000 };

export interface Limits {
  per_minute: number;
  per_hour: number;
}

/**
 * What the response headers report (X-RateLimit-Limit, X-RateLimit-Remaining):
 * what the next request gets. `remaining` is what is left of the window with
 * less left (0 once either is spent), `limit` that window's limit: the minute's
 * unless the hour has less left (or none).
 */
export interface RateState {
  limit: number;
  remaining: number;
}

/** Redis keys are shared by every gateway replica; the prefix must not vary per process. */
const KEY_PREFIX = 'lab:gateway:rl';
/**
 * A read may run beside its count while the token's last count left at least this
 * many requests of the minute: concurrent reads can then not run far past the limit
 * before their counts answer 429.
 */
const OVERLAP_HEADROOM = 8;
/** Tokens whose last count is remembered (a bounded map, cleared when full). */
const MAX_REMEMBERED = 10_000;
/**
 * How long a Redis command may go unanswered before it fails (and the request
 * fails open). A Redis that is connected but silent (a hung server, a black-holed
 * network path) would otherwise hold every authenticated request until TCP gives
 * up, some 15 minutes: the socket stays up, so neither the offline-queue nor the
 * reconnect settings apply. A healthy Redis answers in about a millisecond.
 */
const COMMAND_TIMEOUT_MS = 250;
/** A window store's own bound, never reached (consume compares the request's limit). */
const UNBOUNDED = 2 ** 31 - 1;

/**
 * Password attempts, counted alike at every door that takes an email and a
 * password (the token endpoint's password grant, the OAuth sign-in form, the
 * re-entered password of a signature), in budgets that heal with time rather
 * than lock an account:
 * - per account and client address: guesses from one place at one account. This
 *   is the one a user meets; an attacker elsewhere does not spend it.
 * - per client address, over every account: one place spraying many accounts.
 * - per account, over every address: many places at one account. Spent, it does
 *   not refuse the account: it shrinks each address's budget at it to
 *   `pairWhileSpent` in the hour. An address that was guessing is refused at
 *   once, right password or not; an address that was not (the user's own, or a
 *   fresh one) still has its few tries. So a flood keeps guessing to a few
 *   attempts per address it brings, and cannot lock the user out (decision 050).
 * Only attempts that were checked and failed stay counted: a refused attempt
 * gives back what it counted in the other budgets (one address at one account
 * cannot spend the account-wide budget), and so does the right password.
 */
const SIGN_IN_LIMITS = {
  pair: { per_minute: 10, per_hour: 100 },
  address: { per_minute: 30, per_hour: 300 },
  account: { per_minute: 60, per_hour: 600 },
  pairWhileSpent: { per_minute: 3, per_hour: 3 },
};
/**
 * Password attempts are counted per bucket of the normalised e-mail address (and
 * client address), not per value: the doors are anonymous, and a counter per
 * value would let anyone add one (kept up to an hour, in memory or Redis) with
 * each made-up address. 2^18 buckets bound the counters (two windows each) to some
 * tens of MB at worst, whatever is sent. The price: two accounts may share a
 * bucket and so a budget (with 10,000 accounts, a given one shares with another
 * about one time in 26). The hash need not be secret: whoever can compute an
 * account's bucket knows its address, and could spend its budget directly.
 */
export const SIGN_IN_BUCKETS = 2 ** 18;
const normalised = (email: string) => email.trim().toLowerCase();
export const signInKey = (email: string): string => bucketKey('sign-in', normalised(email), SIGN_IN_BUCKETS);

/**
 * The counter of an anonymous door's key: one of `buckets` by the key's SHA-256,
 * so what anyone may send cannot add counters without bound. Not keyed: every
 * replica must pick the same bucket (Redis counters are shared).
 */
export function bucketKey(prefix: string, value: string, buckets: number): string {
  const bucket = createHash('sha256').update(value).digest().readUInt32BE(0) % buckets;
  return `${prefix}:${bucket.toString(16)}`;
}

/**
 * The client address as the sign-in budgets count it: an IPv6 address by its
 * /64, the block one host or one customer line is given. Counted per address, a
 * host could take a fresh budget per attempt from its own /64 (2^64 of them).
 * An IPv4 address, also one written IPv4-mapped, is itself.
 */
function signInAddress(address: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return mapped[1]!;
  const bare = address.split('%')[0]!;
  if (isIP(bare) !== 6) return address;
  const groups = (part: string) => (part ? part.split(':').flatMap((g) => (g.includes('.') ? ['0', '0'] : [g])) : []);
  const [head = '', tail] = bare.split('::');
  const h = groups(head);
  const t = tail === undefined ? [] : groups(tail);
  const all = [...h, ...Array<string>(8 - h.length - t.length).fill('0'), ...t];
  return `${all
    .slice(0, 4)
    .map((g) => parseInt(g, 16).toString(16))
    .join(':')}::/64`;
}

/**
 * A password check counted against its budgets before it runs (429 past any).
 * Counts are given back when nothing was guessed: the attempt was refused here,
 * identity refused it for lack of capacity (503: too many checks pending,
 * nothing was checked; in someone else's flood a user retrying the busy answer
 * must not spend their own budget), or the password was right (signing a dozen
 * entries in a minute, or signing in, must not use up the user's budget).
 */
export async function countedSignIn<T>(limiter: RateLimiter, who: { email: string; address: string }, check: () => Promise<T>): Promise<T> {
  const email = normalised(who.email);
  const address = signInAddress(who.address);
  const pair = bucketKey('sign-in-pair', `${email}\n${address}`, SIGN_IN_BUCKETS);
  const counted: string[] = [];
  const giveBack = () => Promise.all(counted.map((key) => limiter.refund(key)));
  // the account's budget first: spent, it sets this address's budget at the account
  const account = signInKey(email);
  const accountSpent = await limiter.consume(account, SIGN_IN_LIMITS.account, 'other').then(
    () => {
      counted.push(account);
      return false;
    },
    (err: unknown) => {
      if (err instanceof RateLimitedError) return true;
      throw err;
    },
  );
  const others: [string, Limits][] = [
    [pair, accountSpent ? SIGN_IN_LIMITS.pairWhileSpent : SIGN_IN_LIMITS.pair],
    [bucketKey('sign-in-address', address, SIGN_IN_BUCKETS), SIGN_IN_LIMITS.address],
  ];
  const results = await Promise.allSettled(others.map(([key, limits]) => limiter.consume(key, limits, 'other')));
  results.forEach((r, i) => {
    if (r.status === 'fulfilled') counted.push(others[i]![0]);
  });
  const refused = results.find((r) => r.status === 'rejected');
  if (refused) {
    await giveBack();
    throw refused.reason;
  }
  try {
    const passed = await check();
    await giveBack();
    return passed;
  } catch (err) {
    if (err instanceof DomainError && err.kind === 'unavailable') await giveBack();
    throw err;
  }
}

/** Wrong operator tokens one client address may send (then 429 for a while, right token or not). */
const OPERATOR_FAILURE_LIMITS = { per_minute: 10, per_hour: 100 };
/** Requests of the operator token, over every address: generous, but not without end. */
const OPERATOR_LIMITS = { per_minute: 3_000, per_hour: 100_000 };

/**
 * The management API's door. An address that sent too many wrong operator tokens
 * is refused before its next token is even compared, so guessing stalls however
 * the guesses are answered; the operator token itself has a (generous) budget.
 */
export async function countedOperator(limiter: RateLimiter, address: string, verify: () => void): Promise<void> {
  const failures = bucketKey('operator-failures', address, 2 ** 16);
  if (await limiter.exhausted(failures, OPERATOR_FAILURE_LIMITS)) {
    metrics().rateLimited.inc();
    throw new RateLimitedError({ limit: OPERATOR_FAILURE_LIMITS.per_minute, remaining: 0 });
  }
  try {
    verify();
  } catch (err) {
    await limiter.consume(failures, OPERATOR_FAILURE_LIMITS, 'other').catch(() => undefined);
    throw err;
  }
  await limiter.consume('operator', OPERATOR_LIMITS, 'other');
}

/**
 * Per-token request limits over two windows (minute and hour): one count per
 * token and window, compared with the limits of the request's organisation
 * (organisations may override the defaults). Counters live in Redis when configured (shared across
 * replicas), else in memory. If Redis fails, requests pass (fail open) and a
 * line is logged: a broken counter store must not take the API down.
 */
export class RateLimiter {
  private readonly limiters = new Map<string, RateLimiterAbstract>();
  /** the minute's remaining requests per token, as its last count left them */
  private readonly lastRemaining = new Map<string, number>();
  /** the counts of each key begun in this turn, not sent yet (countTogether) */
  private readonly batches = new Map<string, CountBatch>();
  /** the refusals of each key in this turn, not given back yet (giveBackTogether) */
  private readonly givingBack = new Map<string, GiveBackBatch>();
  private readonly redis?: Redis;
  /** the store failing: logged as it starts and ends, not per request */
  private readonly outages: OutageLog;

  constructor(
    private readonly log: Logger,
    redisUrl?: string,
    /** of the Redis keys: one per deployment, the same in every gateway replica */
    private readonly keyPrefix = KEY_PREFIX,
  ) {
    this.outages = new OutageLog(log, { fields: { effect: 'requests are let through uncounted (fail open)' } });
    if (redisUrl) {
      this.redis = new Redis(redisUrl, {
        // Fail at once while disconnected instead of queueing: we fail open.
        enableOfflineQueue: false,
        maxRetriesPerRequest: 1,
        // The minute and hour windows of a request (and of concurrent requests)
        // go out as one pipelined write instead of a syscall each.
        enableAutoPipelining: true,
        lazyConnect: false,
        // A command not answered in time rejects; the limiters pass that error
        // on, and consume() fails open on it like on any store error.
        commandTimeout: COMMAND_TIMEOUT_MS,
      });
      // the client's own errors (a reconnect failing) count as the outage going on, not as failed commands
      this.redis.on('error', (err: Error) => this.outages.failure(STORE, err));
      this.redis.on('ready', () => this.outages.success(STORE));
    }
  }

  /**
   * The counter store of one window. Its own bound is never reached: the limit is
   * compared here, because a token has one count per window whatever limit applies
   * to a request (a personal access token acts in organisations with different
   * limits; a store per limit would give it a budget in each).
   */
  private limiter(window: 'm' | 'h'): RateLimiterAbstract {
    let l = this.limiters.get(window);
    if (!l) {
      const opts = { points: UNBOUNDED, duration: window === 'm' ? 60 : 3600, keyPrefix: `${this.keyPrefix}:${window}` };
      l = this.redis ? new RateLimiterRedis({ ...opts, storeClient: this.redis }) : new RateLimiterMemory(opts);
      this.limiters.set(window, l);
    }
    return l;
  }

  /** The per-minute and per-hour limits (an unset limit is the default). */
  private bounds(limits: Limits): { perMinute: number; perHour: number } {
    return {
      perMinute: limits.per_minute > 0 ? limits.per_minute : DEFAULT_LIMITS.per_minute,
      perHour: limits.per_hour > 0 ? limits.per_hour : DEFAULT_LIMITS.per_hour,
    };
  }

  /**
   * Counts one request under `key` (a token id, or a sign-in or inbound key)
   * against the limits of this request (for a token, its organisation's); throws
   * 429 rate_limited when the key's count is over either. The counts are the
   * key's whatever limits they were made under: after the limits change, the
   * requests already counted in a window count toward the new limit (lowering a
   * limit bites at once; raising one adds to what is left). A refused request is
   * given back: it got nothing, so it spends neither window (a client retrying
   * in a spent minute does not shorten its hour). Only a token's count is
   * remembered for mayOverlap(): other keys would only crowd the tokens out.
   */
  async consume(key: string, limits: Limits, kind: 'token' | 'other' = 'token'): Promise<RateState> {
    const { perMinute, perHour } = this.bounds(limits);
    const [minute, hour] = await this.countTogether(key);
    // a window whose count failed counts nothing (fail open)
    const counted = (r: PromiseSettledResult<number>) => (r.status === 'fulfilled' ? r.value : 0);
    const rejected = counted(minute) > perMinute || counted(hour) > perHour;
    // what is left once this request is counted, or (refused, and so given back) without it
    const own = rejected ? 1 : 0;
    const state = rateState(perMinute - (counted(minute) - own), perHour - (counted(hour) - own), perMinute, perHour);
    if (kind === 'token') {
      if (this.lastRemaining.size >= MAX_REMEMBERED) this.lastRemaining.clear();
      this.lastRemaining.set(key, state.remaining);
    }
    if (rejected) {
      metrics().rateLimited.inc();
      await this.giveBackTogether(key);
      throw new RateLimitedError(state);
    }
    if (minute.status === 'rejected' || hour.status === 'rejected') {
      for (const r of [minute, hour]) if (r.status === 'rejected') this.failOpen(r.reason);
    } else this.outages.success(STORE);
    return state;
  }

  /**
   * Counts one request under `key` in both windows, together with the other
   * requests of the key begun in the same turn of the event loop (a token's
   * concurrent requests, brought in by one read of the network): the turn's n
   * requests are one count of n per window, two counter commands instead of two
   * each. Each request gets the count it would have had alone, counted in the
   * order they came (the batch's total less those after it), so exactly as many
   * pass as counting them one by one would let through.
   */
  private countTogether(key: string): Promise<[PromiseSettledResult<number>, PromiseSettledResult<number>]> {
    let batch = this.batches.get(key);
    if (!batch) {
      const forming: CountBatch = {
        size: 0,
        counted: new Promise((resolve) => {
          setImmediate(() => {
            this.batches.delete(key);
            // a store that throws rather than rejects fails the batch open all the same (not the process)
            const count = (window: 'm' | 'h') => Promise.resolve().then(() => this.limiter(window).consume(key, forming.size));
            resolve(Promise.allSettled([count('m'), count('h')]));
          });
        }),
      };
      this.batches.set(key, forming);
      batch = forming;
    }
    const counted = batch;
    const position = ++counted.size;
    return counted.counted.then(
      (windows) =>
        windows.map((w) => (w.status === 'fulfilled' ? { status: w.status, value: w.value.consumedPoints - counted.size + position } : w)) as [
          PromiseSettledResult<number>,
          PromiseSettledResult<number>,
        ],
    );
  }

  /** Gives back one counted request (a store error only logs: the count then stands). */
  async refund(key: string): Promise<void> {
    const results = await Promise.allSettled([this.limiter('m'), this.limiter('h')].map((l) => giveBack(l, key, 1)));
    for (const r of results) if (r.status === 'rejected') this.failOpen(r.reason);
  }

  /**
   * Gives back a refused request, with the other refusals of the key in the same
   * turn: a flood of refused requests costs two counter commands a turn more,
   * not two each. Awaited before the 429 is answered, so the client's next
   * request is counted after it.
   */
  private giveBackTogether(key: string): Promise<void> {
    let batch = this.givingBack.get(key);
    if (!batch) {
      const forming: GiveBackBatch = {
        size: 0,
        done: new Promise((resolve) => {
          setImmediate(() => {
            this.givingBack.delete(key);
            const windows = [this.limiter('m'), this.limiter('h')];
            void Promise.allSettled(windows.map((l) => Promise.resolve().then(() => giveBack(l, key, forming.size)))).then((results) => {
              for (const r of results) if (r.status === 'rejected') this.failOpen(r.reason);
              resolve();
            });
          });
        }),
      };
      this.givingBack.set(key, forming);
      batch = forming;
    }
    batch.size++;
    return batch.done;
  }

  /**
   * Whether a read of this token may run while its count is under way: its last
   * count left room. Near the limit (or for a token not counted yet) the read
   * waits for its count, so the requests past the limit never reach a service.
   */
  mayOverlap(tokenId: string): boolean {
    return (this.lastRemaining.get(tokenId) ?? 0) >= OVERLAP_HEADROOM;
  }

  /** Whether `key` has used up either window of `limits`, without counting (a store error: no). */
  async exhausted(key: string, limits: Limits): Promise<boolean> {
    const { perMinute, perHour } = this.bounds(limits);
    const [minute, hour] = await Promise.allSettled([this.limiter('m').get(key), this.limiter('h').get(key)]);
    const used = (r: PromiseSettledResult<{ consumedPoints: number } | null>) => (r.status === 'fulfilled' ? (r.value?.consumedPoints ?? 0) : 0);
    return used(minute) >= perMinute || used(hour) >= perHour;
  }

  /** Resolves once the counter store takes commands (at once in memory); until then counts fail open. */
  async ready(): Promise<void> {
    if (this.redis && this.redis.status !== 'ready') await new Promise((resolve) => this.redis!.once('ready', resolve));
  }

  private failOpen(err: unknown): void {
    metrics().rateLimitBackendErrors.inc();
    this.outages.failure(STORE, err);
  }

  async close(): Promise<void> {
    if (this.redis) await this.redis.quit().catch(() => this.redis?.disconnect());
  }
}

/** The requests of one key counted together: how many, and the windows' totals once counted. */
interface CountBatch {
  size: number;
  counted: Promise<[PromiseSettledResult<{ consumedPoints: number }>, PromiseSettledResult<{ consumedPoints: number }>]>;
}

/** The refusals of one key in one turn, and their giving back once done. */
interface GiveBackBatch {
  size: number;
  done: Promise<void>;
}

/**
 * The headers' state from what is left of each window (negative when over): the
 * window with less left is the one the next request meets; the hour is named
 * when it has less left or none (when both are spent, the minute's end does not
 * free the next request), else the minute, as when no hourly limit is near.
 */
function rateState(minuteLeft: number, hourLeft: number, perMinute: number, perHour: number): RateState {
  const minute = Math.max(0, minuteLeft);
  const hour = Math.max(0, hourLeft);
  return hour < minute || hour === 0 ? { limit: perHour, remaining: hour } : { limit: perMinute, remaining: minute };
}

/**
 * Points back on a window. A window that ended since the count (or whose count
 * failed open) is recreated by the reward below zero, which would be credit in the
 * next window: such a key is dropped instead, a fresh window with nothing counted.
 */
async function giveBack(l: RateLimiterAbstract, key: string, points: number): Promise<void> {
  const res = await l.reward(key, points);
  if (res.consumedPoints < 0) await l.delete(key);
}

/** 429 that still carries the counters for the X-RateLimit-* headers. */
export class RateLimitedError extends DomainError {
  constructor(readonly state: RateState) {
    super('rate_limited', 'rate_limited', 'rate limit exceeded; retry after 60 seconds');
  }
}
