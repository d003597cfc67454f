import type { Socket } from 'node:net';
import type pg from 'pg';

/**
 * A client taken from the pool. pg's pool listens for a client's 'error' only
 * while the client is idle; a connection lost while it is checked out (the server
 * restarted, a backend terminated, a reset) is reported to the statements under
 * way and then emitted as 'error' on the client, which, with no listener, is an
 * uncaught exception that ends the process. The statements' rejections are the
 * report; the listener only keeps the process up.
 */
export async function checkOut(pool: pg.Pool): Promise<{ client: pg.PoolClient; release: (broken?: boolean) => void }> {
  const client = await pool.connect();
  const lost = () => undefined;
  client.on('error', lost);
  return {
    client,
    release: (broken = false) => {
      client.removeListener('error', lost);
      // the pool also drops a client whose connection is gone, broken or not
      client.release(broken);
    },
  };
}

/** The client's socket: read through the pg adapter (decision 055). */
export { socketOf } from './adapters/pg.js';

const corked = new WeakSet<Socket>();

/**
 * Holds a connection's writes until the event loop's check phase: statements sent
 * one after another without waiting (a transaction's BEGIN and first statement,
 * its pipelined ones and COMMIT; a group of shared reads) leave in one write, and
 * the server answers them in one read, instead of one system call and one wake-up
 * each.
 */
export function coalesceWrites(socket: Socket | undefined): void {
  if (!socket || corked.has(socket)) return;
  corked.add(socket);
  socket.cork();
  setImmediate(() => {
    corked.delete(socket);
    socket.uncork();
  });
}
