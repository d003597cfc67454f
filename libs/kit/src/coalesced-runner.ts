import { requestScope } from './context.js';

/**
 * Runs a pass of work on demand, one pass at a time: a kick during a pass asks
 * for exactly one more pass after it, however many kicks arrive. A pass returns
 * true when it stopped with work possibly left (a full batch), to go again at
 * once. The shared loop of every "claim what is due" worker: the outbox relay,
 * the job worker, the webhook delivery worker.
 */
export class CoalescedRunner {
  private current?: Promise<void>;
  private again = false;
  private stopped = false;

  /**
   * onError: a loop of passes failed; onSuccess: one ended without failing (with
   * an OutageLog, a failing loop is logged as it starts failing and as it recovers)
   */
  constructor(
    private readonly pass: () => Promise<boolean>,
    private readonly onError: (err: unknown) => void,
    private readonly onSuccess?: () => void,
  ) {}

  kick(): void {
    if (this.stopped) return;
    if (this.current) {
      this.again = true;
      return;
    }
    // A pass is background work, not part of the call that happened to kick it:
    // it runs outside that call's request scope (its request id, its receipt).
    this.current = requestScope
      .exit(() => this.loop())
      .finally(() => {
        this.current = undefined;
      });
  }

  private async loop(): Promise<void> {
    try {
      let more: boolean;
      do {
        this.again = false;
        more = await this.pass();
        // stop() may have run during the pass: the compiler keeps the narrowing across the await
        // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition
      } while ((more || this.again) && !this.stopped);
      this.onSuccess?.();
    } catch (err) {
      this.onError(err);
    }
  }

  /** Allows kicks again after stop(). */
  resume(): void {
    this.stopped = false;
  }

  /** Refuses further kicks and waits for the pass under way. */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.current;
  }
}
