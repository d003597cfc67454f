import { createServer, connect as tcpConnect, type Server, type Socket } from 'node:net';
import { splice } from './tcp-proxy.js';

/**
 * A TCP balancer in front of a component's replicas, as kube-proxy or an ingress
 * controller is in front of a Deployment's pods: each new connection goes to the
 * next replica in turn and stays with it. A replica whose stop began is still
 * given new connections for `removalLagMs` (their endpoint lists catch up with a
 * pod's termination seconds after its SIGTERM), then no more. A connection it
 * cannot pass on (the replica refused it) is closed on the client, as with
 * kube-proxy: what a process that stopped listening too early does to its clients.
 */
export interface Balancer {
  /** base URL of the balancer */
  url: string;
  /** a ready replica joins the endpoints */
  add(port: number): void;
  /** a replica's stop begins: it leaves the endpoints `removalLagMs` from now */
  remove(port: number): void;
  /** connections passed on, by replica port */
  readonly connections: ReadonlyMap<number, number>;
  /** connections a replica refused (or reset before they were passed on) */
  readonly refused: number;
  close(): Promise<void>;
}

export async function startBalancer(ports: number[], opts: { removalLagMs: number }): Promise<Balancer> {
  const endpoints = [...ports];
  const connections = new Map<number, number>();
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  let refused = 0;
  let turn = 0;
  const server: Server = createServer((client) => {
    const port = endpoints[turn++ % endpoints.length];
    if (port === undefined) return void client.destroy();
    let passed = false;
    const upstream = tcpConnect(port, '127.0.0.1', () => {
      passed = true;
      connections.set(port, (connections.get(port) ?? 0) + 1);
    });
    upstream.on('error', () => {
      if (!passed) refused++;
    });
    splice(client, upstream, sockets);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const own = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${own}`,
    add: (port) => {
      if (!endpoints.includes(port)) endpoints.push(port);
    },
    remove: (port) => {
      const timer = setTimeout(() => {
        timers.delete(timer);
        const i = endpoints.indexOf(port);
        if (i >= 0) endpoints.splice(i, 1);
      }, opts.removalLagMs);
      timers.add(timer);
    },
    connections,
    get refused() {
      return refused;
    },
    close: async () => {
      for (const t of timers) clearTimeout(t);
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
