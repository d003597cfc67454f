import type { Server } from '@grpc/grpc-js';
import type { Http2Session } from 'node:http2';

/**
 * Adapter to a private field of @grpc/grpc-js, pinned to 1.14.7 (decision 055;
 * guarded by test/library-adapters.grpc-js.int.test.ts).
 *
 * grpc-js keeps the node:http2 servers it listens on in `Server#http2Servers` (a Map
 * keyed by the http2 server) and offers no server option for the HTTP/2 receive
 * window: this is the only way to give the server's sessions the window its clients
 * get (grpc.ts, openReceiveWindows). Throws when the field is gone or changed, so an
 * upgrade fails at start instead of silently losing the window.
 */
export interface Http2ServerLike {
  on(event: 'session', listener: (session: Http2Session) => void): unknown;
}

export function http2ServersOf(server: Server): Http2ServerLike[] {
  const servers = (server as unknown as { http2Servers?: unknown }).http2Servers;
  if (!(servers instanceof Map)) throw new Error('@grpc/grpc-js adapter: Server#http2Servers is not a Map (the pinned 1.14.7 has one); see decision 055');
  const keys = [...(servers as Map<unknown, unknown>).keys()];
  for (const k of keys) {
    if (typeof (k as { on?: unknown }).on !== 'function')
      throw new Error('@grpc/grpc-js adapter: Server#http2Servers keys are not http2 servers; see decision 055');
  }
  return keys as Http2ServerLike[];
}
