import type { Server } from 'node:net';
import type { EventEmitter } from 'node:events';

/**
 * Rejects with `Error(message)` once ms have passed. The work itself cannot be
 * cancelled and may still finish; its late result (or failure) is ignored.
 */
export function withTimeout<T>(work: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms);
  });
  return Promise.race([work, expired]).finally(() => clearTimeout(timer));
}

/**
 * Waits until a full writable stream can take more, or is gone. A stream whose
 * peer went away is closed or destroyed and never emits 'drain': waiting for it
 * alone would hold the writer, and whatever it has open (a file, a call), until
 * some deadline or forever. `endings` adds events that also mean gone (a gRPC
 * server call's 'cancelled'). The caller checks the stream afterwards.
 */
export function drainedOrGone(stream: EventEmitter & { destroyed: boolean }, ...endings: string[]): Promise<void> {
  if (stream.destroyed) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const events = ['drain', 'close', 'error', ...endings];
    const done = () => {
      for (const e of events) stream.off(e, done);
      resolve();
    };
    for (const e of events) stream.on(e, done);
  });
}

/**
 * Listens, failing on the first 'error' (port taken), then keeps logging later
 * ones: a listening server still emits 'error' when accepting a connection fails
 * (EMFILE when out of file descriptors), and with no listener that would crash
 * the process. The failure is transient (Node keeps accepting), so it is logged.
 */
export async function listenLogged(server: Server, port: number, host: string, onLaterError: (err: Error) => void): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  server.on('error', onLaterError);
}
