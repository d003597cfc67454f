import { createServer, connect as tcpConnect, type Server, type Socket } from 'node:net';

/** A TCP proxy in front of a server, for tests that take the server away from its clients and give it back. */
export interface CuttableProxy {
  /** host:port of the proxy */
  address: string;
  port: number;
  /** destroys every open connection and refuses new ones */
  cut(): void;
  /** accepts connections again */
  restore(): void;
  close(): Promise<void>;
}

/**
 * Joins a client's socket to its upstream both ways, each kept in `sockets` while
 * open; either side closing or failing closes both.
 */
export function splice(client: Socket, upstream: Socket, sockets: Set<Socket>): void {
  for (const s of [client, upstream]) {
    sockets.add(s);
    s.on('error', () => undefined);
    s.on('close', () => {
      sockets.delete(s);
      client.destroy();
      upstream.destroy();
    });
  }
  client.pipe(upstream).pipe(client);
}

/** Starts a proxy on 127.0.0.1 (a free port) to `host`:`port`. */
export async function cuttableProxy(host: string, port: number): Promise<CuttableProxy> {
  let open = true;
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    if (!open) return void client.destroy();
    splice(client, tcpConnect(port, host), sockets);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const cutAll = () => {
    for (const s of sockets) s.destroy();
  };
  const own = (server.address() as { port: number }).port;
  return {
    address: `127.0.0.1:${own}`,
    port: own,
    cut: () => {
      open = false;
      cutAll();
    },
    restore: () => {
      open = true;
    },
    close: async () => {
      open = false;
      cutAll();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
