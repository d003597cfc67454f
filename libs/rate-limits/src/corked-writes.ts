import type { Writable } from 'node:stream';

/**
 * One write per turn of the event loop for a client's socket: the first command
 * of a turn corks the socket, and it is uncorked (one `writev` of every command
 * buffered meanwhile) once the turn's I/O callbacks have run.
 *
 * Why not ioredis's own `enableAutoPipelining`, which batches the same way: it
 * builds a `Pipeline` per batch, and each Pipeline defines an accessor with a
 * getter of its own; the object then gets a hidden class of its own in old
 * space, which kept the getter, the pipeline, its commands and through their
 * promises every request that waited on them alive through V8's scavenges. The
 * gateway promoted each request's objects that way (a bare ioredis client at 600
 * commands/s: 1.6 MB promoted per scavenge with auto-pipelining, 3 KB without;
 * docs/benchmarks.md, 2026-11-27 (late)).
 */
export class CorkedWrites {
  private corked?: Writable;

  /** Call before issuing commands on `stream` (the client's current socket, replaced on reconnect). */
  batch(stream: Writable | undefined): void {
    if (!stream || this.corked === stream || stream.destroyed) return;
    stream.cork();
    this.corked = stream;
    setImmediate(() => {
      if (this.corked === stream) this.corked = undefined;
      stream.uncork();
    });
  }
}
