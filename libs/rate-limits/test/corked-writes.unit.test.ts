import { Writable } from 'node:stream';
import { CorkedWrites } from '../src/corked-writes.js';

/** A stream that records each write as the underlying resource gets it: one entry per write or writev. */
function recorder(): { stream: Writable; writes: string[][] } {
  const writes: string[][] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, cb) {
      writes.push([chunk.toString()]);
      cb();
    },
    writev(chunks, cb) {
      writes.push(chunks.map((c) => (c.chunk as Buffer).toString()));
      cb();
    },
  });
  return { stream, writes };
}

const turn = () => new Promise((resolve) => setImmediate(resolve));

describe('CorkedWrites', () => {
  it('sends the commands of one turn of the event loop in one write', async () => {
    const { stream, writes } = recorder();
    const batching = new CorkedWrites();
    batching.batch(stream);
    stream.write('a');
    batching.batch(stream);
    stream.write('b');
    await Promise.resolve();
    batching.batch(stream);
    stream.write('c');
    expect(writes).toEqual([]);
    await turn();
    expect(writes).toEqual([['a', 'b', 'c']]);
  });

  it('starts a new batch in the next turn, and leaves a stream it was not asked about alone', async () => {
    const { stream, writes } = recorder();
    const other = recorder();
    const batching = new CorkedWrites();
    batching.batch(stream);
    stream.write('a');
    await turn();
    batching.batch(stream);
    stream.write('b');
    stream.write('c');
    other.stream.write('x');
    await turn();
    expect(writes).toEqual([['a'], ['b', 'c']]);
    expect(other.writes).toEqual([['x']]);
  });

  it('follows the client to its new socket after a reconnect, and ignores a missing or destroyed one', async () => {
    const first = recorder();
    const second = recorder();
    const batching = new CorkedWrites();
    batching.batch(first.stream);
    first.stream.write('a');
    batching.batch(second.stream);
    second.stream.write('b');
    second.stream.write('c');
    batching.batch(undefined);
    const gone = recorder();
    gone.stream.destroy();
    batching.batch(gone.stream);
    expect(gone.stream.writableCorked).toBe(0);
    await turn();
    expect(first.writes).toEqual([['a']]);
    expect(second.writes).toEqual([['b', 'c']]);
    expect(second.stream.writableCorked).toBe(0);
  });
});
