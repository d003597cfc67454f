import { errText } from './error-text.js';
import type { Logger } from './logger.js';

/**
 * Logs a dependency's failures as changes of state instead of one line per
 * attempt: the first failure after success is one line ("<what> unavailable"),
 * the first success after failures is another, with how many failures there
 * were and for how long ("<what> available again after N failures"). While the
 * outage lasts, one reminder line at most every `remindEveryMs` carries the
 * count so far: a long outage still shows in a recent window of the log.
 *
 * A 192-request outage of a peer was 192 identical lines (or none at all);
 * with this it is two lines an operator can read as an outage.
 *
 * One instance watches any number of dependencies, by key (a service name,
 * "redis", "bus"): each has its own state.
 */
export interface OutageLogOptions {
  /** at most one "still unavailable" line per key this often (0: never) */
  remindEveryMs?: number;
  /** extra fields on every line of this instance (e.g. { component: 'rate-limit' }) */
  fields?: Record<string, unknown>;
}

interface Outage {
  since: number;
  failures: number;
  remindedAt: number;
  lastError: string;
}

const DEFAULT_REMIND_MS = 60_000;

export class OutageLog {
  private readonly down = new Map<string, Outage>();
  private readonly remindEveryMs: number;

  constructor(
    private readonly log: Logger,
    private readonly opts: OutageLogOptions = {},
  ) {
    this.remindEveryMs = opts.remindEveryMs ?? DEFAULT_REMIND_MS;
  }

  /** One failed attempt on `key`: logged only when it starts an outage (or is due a reminder). */
  failure(key: string, err: unknown, fields: Record<string, unknown> = {}): void {
    const now = Date.now();
    const error = errText(err);
    const o = this.down.get(key);
    if (!o) {
      this.down.set(key, { since: now, failures: 1, remindedAt: now, lastError: error });
      this.log.warn({ ...this.opts.fields, ...fields, dependency: key, state: 'unavailable', err: error }, `${key} unavailable`);
      return;
    }
    o.failures++;
    o.lastError = error;
    if (this.remindEveryMs > 0 && now - o.remindedAt >= this.remindEveryMs) {
      o.remindedAt = now;
      this.log.warn(
        { ...this.opts.fields, ...fields, dependency: key, state: 'unavailable', failures: o.failures, down_ms: now - o.since, err: error },
        `${key} still unavailable after ${o.failures} failures`,
      );
    }
  }

  /** One successful attempt on `key`: logged only when it ends an outage. Cheap when nothing was down. */
  success(key: string, fields: Record<string, unknown> = {}): void {
    if (this.down.size === 0) return;
    const o = this.down.get(key);
    if (!o) return;
    this.down.delete(key);
    this.log.info(
      { ...this.opts.fields, ...fields, dependency: key, state: 'available', failures: o.failures, down_ms: Date.now() - o.since, last_err: o.lastError },
      `${key} available again after ${o.failures} failures`,
    );
  }

  /** Whether `key` is in an outage (its last attempt failed). */
  isDown(key: string): boolean {
    return this.down.has(key);
  }

  /** Failures counted so far in `key`'s current outage (0 when it is up). */
  failures(key: string): number {
    return this.down.get(key)?.failures ?? 0;
  }
}
