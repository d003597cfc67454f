/**
 * Group commit for consumers: items handed in while a write is under way are
 * written together by the next one, so a burst of N messages costs a few
 * statements and commits instead of N. Each add() settles when its own item is
 * written, so a consumer acknowledges a message only once it is stored.
 *
 * A failing batch of several items is retried item by item, so that one bad
 * item fails alone (and goes to its consumer's retry and dead-letter path)
 * instead of failing every message that happened to share its batch.
 */
export class Batcher<T> {
  private pending: { item: T; resolve: () => void; reject: (err: unknown) => void }[] = [];
  private draining = false;

  constructor(
    private readonly write: (items: T[]) => Promise<void>,
    private readonly maxBatch = 200,
  ) {}

  add(item: T): Promise<void> {
    return new Promise((resolve, reject) => {
      this.pending.push({ item, resolve, reject });
      if (!this.draining) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.draining = true;
    // let the deliveries that arrived in the same burst join the first batch
    await new Promise((r) => setImmediate(r));
    while (this.pending.length) {
      const batch = this.pending.splice(0, this.maxBatch);
      try {
        await this.write(batch.map((b) => b.item));
        for (const b of batch) b.resolve();
      } catch (err) {
        if (batch.length === 1) batch[0]!.reject(err);
        else await Promise.all(batch.map((b) => this.write([b.item]).then(b.resolve, b.reject)));
      }
    }
    this.draining = false;
  }
}
