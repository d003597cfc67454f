import type pg from 'pg';
import { metrics } from './metrics.js';
import { checkOut, coalesceWrites, socketOf } from './pg-connection.js';
import { POINT_READ_TEXT } from './statement-names.js';

/** A client taken from the pool, with its release. */
type CheckedOut = Awaited<ReturnType<typeof checkOut>>;

/**
 * Shared reads: the point reads outside a transaction that begin in the same turn
 * of the event loop (the calls one read of the gRPC connection brought in) go out
 * on one pooled connection, one behind the other without waiting for answers (the
 * client runs in pipeline mode), in one socket write; the server reads them in one
 * go and answers on the one socket. Alone, each would take a connection of its own
 * and cost a write, a read and a wake-up on both sides: on this kind of machine a
 * round trip to PostgreSQL costs both processes more CPU than a read by primary key
 * does (measured on GET by id: PostgreSQL's CPU per request fell by two thirds,
 * the service's by a third).
 *
 * Nothing changes in what a statement sees or does: each keeps its own Sync, so
 * its own implicit transaction and snapshot, and its own error (one failing
 * statement fails alone). A statement may wait for the ones ahead of it in its
 * group (at most maxMembers), where alone it would have waited for a free
 * connection; the next turn's statements take another connection. Only point
 * reads share (queries marked POINT_READ: a few rows by their key, a record by its
 * id): behind a page of a million-row organisation's list (about 100 ms) or a
 * housekeeping delete, the reads begun beside it would wait, where on connections
 * of their own they would not. Every other statement takes a connection of its own,
 * as before.
 */
export class SharedReads {
  private forming: Group | undefined;

  constructor(
    private readonly pool: pg.Pool,
    private readonly maxMembers = 32,
  ) {}

  query(config: unknown, values?: unknown): Promise<unknown> {
    if (!isPointRead(config)) return (this.pool.query as (config: unknown, values: unknown) => Promise<unknown>)(config, values);
    let group = this.forming;
    if (!group || group.members >= this.maxMembers) group = this.open();
    const member = group;
    member.members++;
    metrics().sharedReads.inc();
    return member.connection.then(
      ({ client }) =>
        new Promise((resolve, reject) => {
          // the members that find the connection in the same turn leave in one write
          coalesceWrites(socketOf(client));
          // With a callback, not in pg's promise mode: that mode stores a closure
          // literal on the query (`query.callback = (err, res) => ...`), which V8
          // allocates in the old generation (decision 040), so every answer's rows
          // would outlive scavenges until a mark-compact. A callback made here and
          // handed over is young and dies young with the answer.
          const answered = (err: Error | null, res: unknown) => {
            member.settled++;
            this.releaseIfDone(member);
            if (err) reject(err);
            else resolve(res);
          };
          try {
            (client.query as (config: unknown, values: unknown, callback: typeof answered) => void)(config, values, answered);
          } catch (err) {
            // refused before it was sent (not a query pg can run): it still counts as answered
            answered(err as Error, undefined);
          }
        }),
    );
  }

  private open(): Group {
    const group: Group = { members: 0, settled: 0, closed: false, released: false, connection: checkOut(this.pool) };
    this.forming = group;
    metrics().sharedReadGroups.inc();
    // a failed checkout fails every member; nothing to release
    group.connection.catch(() => undefined);
    setImmediate(() => {
      if (this.forming === group) this.forming = undefined;
      group.closed = true;
      this.releaseIfDone(group);
    });
    return group;
  }

  /** Gives the connection back once the group takes no more members and all of them have their answers. */
  private releaseIfDone(group: Group): void {
    if (!group.closed || group.settled < group.members || group.released) return;
    group.released = true;
    group.connection.then(
      ({ release }) => release(),
      () => undefined,
    );
  }
}

interface Group {
  members: number;
  settled: number;
  /** takes no more members (the turn it was formed in has ended, or it is full) */
  closed: boolean;
  released: boolean;
  connection: Promise<CheckedOut>;
}

/** A statement marked as a point read: drizzle's config ({ text }) or a bare text. */
function isPointRead(config: unknown): boolean {
  const text = typeof config === 'string' ? config : (config as { text?: unknown } | null)?.text;
  return typeof text === 'string' && text.startsWith(POINT_READ_TEXT);
}
