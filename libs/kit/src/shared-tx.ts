import { AsyncResource } from 'node:async_hooks';

/**
 * Group commit for independent writes. Writes that begin in the same turn of the
 * event loop (the calls one read of the gRPC connection brought in) run together
 * in one transaction: one BEGIN and one COMMIT, one WAL flush, and their
 * statements leaving in the same socket writes, instead of all of that for each.
 * On this kind of machine a round trip to PostgreSQL costs both processes more
 * CPU than a short INSERT does, so under load this is most of a write's cost.
 *
 * The group is only a way of sending: what commits is what would have committed
 * had each write run alone. When anything in the group fails, the server has
 * rolled the whole transaction back (a failed statement aborts it, and the COMMIT
 * behind it answers ROLLBACK), and each write then runs again in a transaction of
 * its own, where a bad one fails alone with its own error and the others commit.
 * A write's function may therefore run twice: it must do nothing but statements
 * on its transaction (what it emits is collected per run). Only when the outcome
 * of the COMMIT is unknown (the connection lost while it was on its way) does
 * nothing run again: every member gets the error, as a lone write would.
 *
 * Members run concurrently on the group's one connection (pipelined: statements
 * are queued in order), each in its own async context (its request's scope, its
 * Idempotency-Key receipt, its trace). Their statements interleave: they see each
 * other's rows and never wait for each other's row locks, so a write that reads a
 * row and then writes from what it read could decide otherwise than alone. Such
 * writes must not share (the records engine's resources opt in: sharedCreates).
 */
export class SharedTransactions<Tx> {
  private forming: Member<Tx>[] | undefined;

  constructor(
    private readonly runAlone: <T>(fn: (tx: Tx) => Promise<T>) => Promise<T>,
    private readonly onGroup: (size: number, outcome: 'committed' | 'rerun') => void = () => undefined,
    private readonly maxMembers = 32,
  ) {}

  run<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const member: Member<Tx> = {
        // the member's statements and what they read of their request's scope
        // belong to its own call, whichever call happened to start the group
        fn: AsyncResource.bind(fn),
        resolve: resolve as (v: unknown) => void,
        reject,
      };
      if (this.forming && this.forming.length < this.maxMembers) {
        this.forming.push(member);
        return;
      }
      const group = [member];
      this.forming = group;
      setImmediate(() => {
        if (this.forming === group) this.forming = undefined;
        void this.commit(group);
      });
    });
  }

  private async commit(group: Member<Tx>[]): Promise<void> {
    if (group.length === 1) {
      const [m] = group as [Member<Tx>];
      return this.runAlone(m.fn).then(m.resolve, m.reject);
    }
    // set inside the transaction's callback (an object: the compiler does not follow a let there)
    const progress = { membersDone: false };
    try {
      const results = await this.runAlone(async (tx) => {
        const settled = await Promise.allSettled(group.map((m) => m.fn(tx)));
        // one member failed: the transaction is aborted (or would commit a
        // member's half-done work); thrown here, no COMMIT is sent
        if (settled.some((s) => s.status === 'rejected')) throw new MemberFailed();
        progress.membersDone = true;
        return settled.map((s) => (s as PromiseFulfilledResult<unknown>).value);
      });
      this.onGroup(group.length, 'committed');
      group.forEach((m, i) => m.resolve(results[i]));
    } catch (err) {
      if (progress.membersDone && !rolledBack(err)) {
        // the COMMIT's fate is unknown: running the members again could write twice
        for (const m of group) m.reject(err);
        return;
      }
      this.onGroup(group.length, 'rerun');
      await Promise.all(group.map((m) => this.runAlone(m.fn).then(m.resolve, m.reject)));
    }
  }
}

interface Member<Tx> {
  fn: (tx: Tx) => Promise<unknown>;
  resolve: (value: unknown) => void;
  reject: (err: unknown) => void;
}

class MemberFailed extends Error {
  constructor() {
    super('a write of the shared transaction failed');
  }
}

const notCommitted = new WeakSet<object>();

/**
 * Marks the error a transaction failed with as one that certainly left nothing
 * committed: a statement handed over to run with the COMMIT failed (the server
 * aborted the transaction, and the COMMIT behind it answered ROLLBACK), whatever
 * the error was turned into on its way (a receipt's conflict is a DomainError),
 * or the COMMIT answered something else than COMMIT.
 */
export function markNotCommitted<E>(err: E): E {
  if (typeof err === 'object' && err !== null) notCommitted.add(err);
  return err;
}

/**
 * Whether an error after the members finished certainly left nothing committed:
 * marked so, or one the server reported (a SQLSTATE beside a severity: the
 * COMMIT itself failed, and the transaction with it).
 */
function rolledBack(err: unknown): boolean {
  if (typeof err === 'object' && err !== null && notCommitted.has(err)) return true;
  for (let e = err as { code?: unknown; severity?: unknown; cause?: unknown } | null, depth = 0; e && depth < 5; e = e.cause as typeof e, depth++) {
    // a server's error has a severity beside its SQLSTATE; a socket's (EPIPE) has neither
    if (typeof e.severity === 'string' && typeof e.code === 'string' && /^[0-9A-Z]{5}$/.test(e.code)) return true;
  }
  return false;
}
