import { hash, verify } from '@node-rs/argon2';
import { randomBytes } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { DomainError } from '@lab/kit';

/**
 * Password hashing: argon2id (the library's default algorithm) with its default
 * cost (19 MiB, 2 passes). verify() compares in constant time.
 */
export const hashPassword = (password: string): Promise<string> => hash(password);

/**
 * A hash of a password no one knows, verified against when there is no real
 * hash (unknown email, user without password), so such attempts cost the same
 * time as a wrong password and do not reveal which emails exist.
 */
let dummy: Promise<string> | undefined;
const dummyHash = () => (dummy ??= hash(randomBytes(32).toString('base64url')));

/** Computes the dummy hash at start-up, so the first unknown email is not slower than later ones. */
export const preparePasswordChecks = async (): Promise<void> => {
  await dummyHash();
};

export type VerifyHash = (hash: string, password: string) => Promise<boolean>;

export interface PasswordCheckLimits {
  /** checks that may run at once (each holds a libuv threadpool thread for one argon2 verify) */
  running: number;
  /** admitted checks that may wait for a running slot; beyond that an attempt is refused at once */
  queued: number;
}

/** libuv reads UV_THREADPOOL_SIZE once, at its first use of the pool; 4 unless set, at most 1024. */
function threadpoolSize(): number {
  const n = Number(process.env.UV_THREADPOOL_SIZE);
  return Number.isInteger(n) && n > 0 ? Math.min(n, 1024) : 4;
}

/**
 * A verify is pure CPU for ~25 ms, so running more than there are cores adds no
 * throughput, only latency to each of them (and 19 MiB each). The threadpool is
 * also where DNS lookups (getaddrinfo: reconnects to PostgreSQL and RabbitMQ by
 * host name), fs and async crypto wait their turn, in the standalone process for
 * every service and the gateway too: at least one of its threads stays free of
 * verifies. Hence min(cores, pool - 1), never below 1.
 */
export const DEFAULT_RUNNING_CHECKS = Math.max(1, Math.min(availableParallelism(), threadpoolSize() - 1));
/**
 * 32 waiting per running slot: at ~25 ms a verify the last in line waits about
 * 0.8 s, far inside the gateway's 10 s call deadline, while a burst of real
 * sign-ins (a class logging in at once) still fits without a refusal.
 */
export const QUEUED_CHECKS_PER_RUNNING = 32;

/** The refusal of an attempt while the queue is full: retryable, and it says nothing about the account. */
const overloaded = () => DomainError.unavailable('too many sign-in attempts are being checked right now; try again in a moment', 'service_unavailable');

/**
 * Bounded admission of password checks. Every attempt (unknown emails included)
 * costs one argon2 verify on the threadpool; a flood of attempts with random
 * emails, each harmless to the per-account throttle, would otherwise queue
 * verifies without bound, delay real sign-ins unboundedly and starve the
 * threadpool. So at most `running` checks run, at most `queued` wait in FIFO
 * order, and any further attempt is refused at once, before its user lookup or
 * verify, so a refusal costs nothing and cannot depend on whether the email
 * exists. An admitted attempt is unchanged: it always spends exactly one verify.
 */
export class PasswordChecks {
  private running = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(
    private readonly limits: PasswordCheckLimits,
    private readonly verifyHash: VerifyHash = verify,
  ) {}

  /**
   * One sign-in check: `lookup` (the user's stored hash) and the verify run inside
   * the admitted slot, so the DB lookups of a flood are bounded too and a refused
   * attempt did no work. The row when its hash matches, else null.
   */
  async check<T extends { password_hash: string | null }>(lookup: () => Promise<T | null | undefined>, password: string): Promise<T | null> {
    await this.admit();
    try {
      const row = (await lookup()) ?? null;
      const stored = row?.password_hash ?? null;
      const target = stored ?? (await dummyHash());
      let ok: boolean;
      try {
        ok = await this.verifyHash(target, password);
      } catch {
        ok = false; // a malformed stored hash is a mismatch, not a crash
      }
      return ok && stored !== null ? row : null;
    } finally {
      this.release();
    }
  }

  /** Snapshot for tests and diagnostics. */
  get load(): { running: number; queued: number } {
    return { running: this.running, queued: this.waiting.length };
  }

  /** Synchronous up to the wait, so the full-queue refusal happens before the caller does anything. */
  private admit(): Promise<void> {
    if (this.running < this.limits.running) {
      this.running++;
      return Promise.resolve();
    }
    if (this.waiting.length >= this.limits.queued) return Promise.reject(overloaded());
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  /** The freed slot goes straight to the oldest waiter, so a newcomer can never overtake the queue. */
  private release(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.running--;
  }
}

let checks = new PasswordChecks({ running: DEFAULT_RUNNING_CHECKS, queued: DEFAULT_RUNNING_CHECKS * QUEUED_CHECKS_PER_RUNNING });

/**
 * Sets the process's limits (identity's register, from the environment). Checks
 * admitted under the old limits finish there; one process serves one identity.
 */
export function configurePasswordChecks(limits: PasswordCheckLimits): void {
  checks = new PasswordChecks(limits);
}

/** A sign-in by lookup: the user row when its password matches; refused with 503 when too many checks are pending. */
export const findWithPassword = <T extends { password_hash: string | null }>(
  lookup: () => Promise<T | null | undefined>,
  password: string,
): Promise<T | null> => checks.check(lookup, password);
