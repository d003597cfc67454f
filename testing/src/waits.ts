import { setTimeout as pause } from 'node:timers/promises';

/** How long `waitFor` polls, and how often. */
export interface WaitOptions {
  /** Fails after this long; 10 s unless given. */
  timeoutMs?: number;
  /** Between two checks; 25 ms unless given. */
  intervalMs?: number;
}

/** What a check gives while its condition does not hold yet. */
type NotYet = undefined | null | false;

/**
 * Polls `check` until it gives something other than undefined, null or false, and
 * resolves with that (a row, a response, `true`). Tests wait with it for the
 * condition they need (a row count, a queue depth, an event received) instead of
 * sleeping a fixed time: a sleep is either too short on a loaded machine (a flaky
 * test) or longer than needed everywhere else (a slow one). After the deadline it
 * fails naming `what` did not happen, so a failure says what was awaited rather
 * than "timeout". An error thrown by `check` fails the wait at once: it is an
 * assertion or a broken query, which polling would only hide.
 */
export async function waitFor<T>(what: string, check: () => T | Promise<T>, opts: WaitOptions | number = {}): Promise<Exclude<T, NotYet>> {
  const { timeoutMs = 10_000, intervalMs = 25 } = typeof opts === 'number' ? { timeoutMs: opts } : opts;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined && v !== null && v !== false) return v as Exclude<T, NotYet>;
    if (Date.now() >= deadline) throw new Error(`${what}: did not happen within ${timeoutMs} ms`);
    await pause(intervalMs);
  }
}

/**
 * The one pause a test may make: a load generator's, between the requests of its
 * load (its rate) or before a retry (its backoff). It is part of
 * the traffic a fault or load test makes, as a real client's pacing is part of
 * real traffic, not a wait for something to happen: a test waits for conditions
 * with `waitFor`, and test-waits.unit.test.ts refuses every other sleep in tests.
 */
export function pace(ms: number): Promise<void> {
  return pause(ms);
}
