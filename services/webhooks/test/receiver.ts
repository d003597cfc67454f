import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { waitFor } from '@lab/testing/waits';

export interface Received {
  headers: IncomingHttpHeaders;
  raw: Buffer;
  body: any;
}

/** A real HTTP receiver on 127.0.0.1 whose answer to the n-th request (1-based) is chosen by the test. */
export class Receiver {
  readonly requests: Received[] = [];
  /** TCP connections accepted, to see keep-alive reuse */
  connections = 0;
  private server?: Server;
  url = '';

  constructor(private readonly answer: (n: number, r: Received) => number = () => 200) {}

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const raw = Buffer.concat(chunks);
        const r: Received = { headers: req.headers, raw, body: JSON.parse(raw.toString('utf8')) };
        this.requests.push(r);
        res.statusCode = this.answer(this.requests.length, r);
        res.end('ok');
      });
    });
    this.server.on('connection', () => this.connections++);
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/hook`;
    return this;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()) ?? resolve());
  }
}

/** Polls until check() returns a value other than undefined, or fails after the timeout naming `what`. */
export const eventually = <T>(check: () => Promise<T | undefined> | T | undefined, timeoutMs = 20_000, what = 'the awaited condition'): Promise<T> =>
  waitFor(what, check, { timeoutMs, intervalMs: 50 });
