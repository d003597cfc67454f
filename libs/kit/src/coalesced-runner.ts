import { requestScope } from './context.js';

/**
 * Runs a pass of work on demand, one pass at a time: a kick during a pass asks
 * for exactly one more pass after it, however many kicks arrive. A pass returns
 * true when it stopped with work possibly left (a full batch), to go again at
 * once. The shared loop of every "claim what is due" worker: the outbox relay,
 * the job worker, the webhook delivery worker.
 *
 * `spacingMs` spaces the passes: one starts no sooner than that after the one
 * before began (a full batch still goes again at once, and a kick after a quiet
 * moment runs at once), so a burst of kicks is served by a few larger passes.
 * Where every statement costs the same one thread the requests need (the
 * embedded database), a pass per few writes spends more on its own statements
 * than on the rows it moves.
 */
export class CoalescedRunner {
  private current?: Promise<void>;
  private again = false;
  private stopped = false;
  private readonly spacingMs: number;
  /** when the last pass began (performance.now()) */
  private lastBegan = -Infinity;
  /** ends the spacing wait under way (stop) */
  private wake?: () => void;

  /**
   * onError: a loop of passes failed; onSuccess: one ended without failing (with
   * an OutageLog, a failing loop is logged as it starts failing and as it recovers)
   */
  constructor(
    private readonly pass: () => Promise<boolean>,
    private readonly onError: (err: unknown) => void,
    private readonly onSuccess?: () => void,
    options: { spacingMs?: number } = {},
  ) {
    this.spacingMs = options.spacingMs ?? 0;
  }

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
      let more = false;
      do {
        // a full batch goes again at once; any other pass waits out the spacing
        if (!more && this.spacingMs > 0) {
          await this.spaced(this.lastBegan);
          if (this.stopped) break; // stop() may have run during the wait
        }
        this.again = false;
        this.lastBegan = performance.now();
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

  /** Waits until spacingMs after `began`, or until stop(). */
  private async spaced(began: number): Promise<void> {
    const left = began + this.spacingMs - performance.now();
    if (left <= 0) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, left);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    this.wake = undefined;
  }

  /** Refuses further kicks and waits for the pass under way. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.wake?.();
    await this.current;
  }
}
