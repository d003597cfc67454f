import type { Logger } from './logger.js';
import { withTimeout } from './waits.js';

/** A named retention rule: removes what is past its time and says how much. */
export type RetentionRule = [what: string, run: () => Promise<number>];

/** By default the first pass comes 1 to 2 minutes after start (replicas started together spread out). */
const FIRST_PASS_MS = 60_000;
/** How long a stop waits for a pass under way before the database closes under it. */
const STOP_WAIT_MS = 5_000;

/**
 * Runs retention rules: one pass soon after start (a process restarted more
 * often than the interval still purges), then every `everyMs`, each pass timed
 * from the end of the last, so passes never overlap however long a backlog
 * takes. Rules run one after another; one failing is logged and the next runs.
 */
export class Housekeeping {
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;
  private stopped = false;

  constructor(
    private readonly rules: RetentionRule[],
    private readonly log: Logger,
    private readonly timing: { everyMs: number; firstMs?: number },
  ) {}

  start(): void {
    const { everyMs, firstMs } = this.timing;
    this.schedule(firstMs ?? Math.min(everyMs, FIRST_PASS_MS * (1 + Math.random())));
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.running = this.pass().finally(() => {
        this.running = undefined;
        this.schedule(this.timing.everyMs);
      });
    }, ms);
    this.timer.unref();
  }

  private async pass(): Promise<void> {
    for (const [what, run] of this.rules) {
      if (this.stopped) return;
      try {
        const removed = await run();
        if (removed) this.log.info({ what, removed }, 'housekeeping removed expired data');
      } catch (err) {
        this.log.warn({ err, what }, 'housekeeping failed');
      }
    }
  }

  /** No further pass; waits a little for one under way (a statement cut by the closing pool only rolls back). */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    if (this.running) await withTimeout(this.running, STOP_WAIT_MS, 'housekeeping still running').catch(() => undefined);
  }
}
