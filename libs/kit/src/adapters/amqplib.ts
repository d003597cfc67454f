import type { ChannelModel } from 'amqplib';

/**
 * Adapter to private fields of amqplib, pinned to 2.3.1 (decision 055; guarded by
 * test/library-adapters.amqplib.int.test.ts).
 *
 * amqplib's multiplexer moves the frames that channels have queued onto the socket
 * one `write` each: a relay batch of N messages cost N syscalls (and N wake-ups of
 * the broker), the largest cost of a write in the profile (decision 034). Corking the
 * socket (`muxer.out`) for the length of one multiplexer pass (`muxer._readIncoming`)
 * sends the whole pass in one writev. Frame order and flow control are untouched (the
 * pass still stops when the socket asks it to). Throws when the internals are gone or
 * changed, so an upgrade fails at connect instead of silently losing the batching.
 */
interface MuxInternals {
  out?: { cork?: unknown; uncork?: unknown };
  _readIncoming?: unknown;
}

export function corkMultiplexerPasses(model: ChannelModel): void {
  const mux = (model as unknown as { connection?: { muxer?: MuxInternals } }).connection?.muxer;
  const out = mux?.out;
  const pass = mux?._readIncoming;
  if (!mux || typeof pass !== 'function' || typeof out?.cork !== 'function' || typeof out.uncork !== 'function') {
    throw new Error('amqplib adapter: connection.muxer._readIncoming / muxer.out.cork are not there (the pinned 2.3.1 has them); see decision 055');
  }
  const socket = out as { cork(): void; uncork(): void };
  mux._readIncoming = function corkedPass(this: MuxInternals) {
    socket.cork();
    try {
      (pass as () => void).call(this);
    } finally {
      socket.uncork();
    }
  };
}
