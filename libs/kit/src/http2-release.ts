import { channel, subscribe, type Channel } from 'node:diagnostics_channel';

/**
 * Marks a channel this module subscribed to. Kept on the channel rather than in a
 * module variable: the channels are the process's, while a module can be loaded more
 * than once in a process (a test runner's module registry per test file), and each
 * subscription would add a listener to every stream.
 */
const SUBSCRIBED = Symbol.for('@lab/kit:http2-release');

/**
 * Lets go of what a closed HTTP/2 stream still points to: one turn of the event
 * loop after a stream's 'close' (its last event), its listeners are removed, for
 * the gRPC client and server streams of this process alike. Node publishes every
 * stream's close on the `http2.client.stream.close` and `http2.server.stream.close`
 * diagnostics channels; installing once per process is enough.
 *
 * Why: an HTTP/2 stream is a Duplex, and since Node.js 24.15.0 every Writable holds a
 * closure that V8 allocates in the old generation (WritableState's `this.onwrite =
 * (er) => onwrite(stream, er)`: V8 puts a function literal assigned straight to a
 * property there). A scavenge takes old objects as live, so a closed stream outlives
 * every scavenge until the next mark-compact, and with it everything its listeners
 * reach (grpc-js's call objects, the caller's promise and request), all promoted.
 * Measured (docs/benchmarks.md, 2026-11-27 (afternoon)): a bare grpc-js client at 600
 * calls/s promoted 3.3-3.75 MB per scavenge, with this 0.45-0.5 MB, and its scavenges
 * took 4-7 ms instead of 12-20. Node.js 24.14 and earlier do not keep the streams
 * (decision 040; `bench/promotion-roots.mjs` tells for the running Node.js), so this
 * can go when Node no longer does.
 *
 * Safe after 'close': Node emits nothing more on a destroyed stream, and grpc-js
 * reads the outcome of a call in its 'close' listener, which has run by then.
 */
export function releaseClosedHttp2Streams(): void {
  for (const name of ['http2.client.stream.close', 'http2.server.stream.close']) {
    const marked = channel(name) as Channel & { [SUBSCRIBED]?: true };
    if (marked[SUBSCRIBED]) continue;
    marked[SUBSCRIBED] = true;
    subscribe(name, release);
  }
}

function release(message: unknown): void {
  const stream = (message as { stream?: NodeJS.EventEmitter }).stream;
  stream?.once('close', () => setImmediate(() => stream.removeAllListeners()));
}
