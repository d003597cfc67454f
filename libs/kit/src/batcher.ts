/**
 * Group commit: items handed in while a write is under way are written together
 * by the next one, so a burst of N items costs a few statements and commits
 * instead of N. Each add() settles when its own item is written, with its own
 * result when the write returns one per item (in the order of the items), so a
 * consumer acknowledges a message only once it is stored and a request sees only
 * its own outcome.
 *
 * A failing batch of several items is retried item by item, so that one bad
 * item fails alone (and goes to its consumer's retry and dead-letter path)
 * instead of failing every item that happened to share its batch.
 */
export class Batcher<T, R = void> {
  private pending: { item: T; resolve: (r: R) => void; reject: (err: unknown) => void }[] = [];
  private draining = false;

  constructor(
    private readonly write: (items: T[]) => Promise<R[] | void>,
    private readonly maxBatch = 200,
  ) {}

  add(item: T): Promise<R> {
    return new Promise((resolve, reject) => {
      this.pending.push({ item, resolve, reject });
      if (!this.draining) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.draining = true;
    // let the items that arrived in the same burst join the first batch
    await new Promise((r) => setImmediate(r));
    while (this.pending.length) {
      const batch = this.pending.splice(0, this.maxBatch);
      try {
        const results = await this.write(batch.map((b) => b.item));
        batch.forEach((b, i) => b.resolve(results?.[i] as R));
      } catch (err) {
        if (batch.length === 1) batch[0]!.reject(err);
        else await Promise.all(batch.map((b) => this.write([b.item]).then((r) => b.resolve(r?.[0] as R), b.reject)));
      }
    }
    this.draining = false;
  }
}
