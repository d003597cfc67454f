import { connect } from 'node:net';

/**
 * Writes `text` as is on a new connection to `base` (an http:// URL) and resolves with
 * everything written back until the connection closes (or 10 s pass). For what an HTTP
 * client library will not send: pipelined requests, odd Expect fields, broken framing.
 */
export function rawExchange(base: string, text: string): Promise<string> {
  const url = new URL(base);
  return new Promise((resolve) => {
    let out = '';
    const socket = connect(Number(url.port), url.hostname, () => socket.write(text));
    const timer = setTimeout(() => socket.destroy(), 10_000);
    socket.on('data', (c: Buffer) => (out += c.toString()));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(out);
    });
  });
}
