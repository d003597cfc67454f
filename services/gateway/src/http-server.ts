import { createServer, IncomingMessage, ServerResponse, type Server } from 'node:http';
import type { Socket } from 'node:net';
import type { Express } from 'express';

/**
 * Node's HTTP server for an express app, whose requests and responses are made
 * with the app's prototypes (`app.request`, `app.response`) from the start.
 *
 * Why: express gives every request and response its prototype on arrival
 * (`Object.setPrototypeOf(req, app.request)` in `app.handle`), and an object whose
 * prototype is changed after it was made kept V8's scavenger from freeing it: each
 * request's whole graph (its sockets' writes, its gRPC call, its Redis commands)
 * outlived the next scavenge and was promoted, to be found dead by a mark-compact
 * later. Measured on this machine at 600 requests/s (docs/benchmarks.md,
 * 2026-11-27 (late)): a bare express app promoted 2.6 MB per scavenge, the same
 * app on this server 1 KB; the gateway's scavenges and mark-compacts were the
 * stalls behind its p99. Made with the right prototype, express's
 * `setPrototypeOf` finds it already set and changes nothing.
 *
 * The constructors are node's own, called on an object of the app's prototype
 * (`IncomingMessage` and `ServerResponse` are plain constructor functions in
 * node, which its own subclasses call the same way); `Reflect.construct` would do
 * the same but measured as badly as `setPrototypeOf`.
 */
export function createExpressServer(app: Express): Server {
  if (isClass(IncomingMessage) || isClass(ServerResponse)) return createServer(app);
  const incoming = IncomingMessage as unknown as (this: IncomingMessage, socket: Socket) => void;
  const response = ServerResponse as unknown as (this: ServerResponse, ...args: unknown[]) => void;
  function AppRequest(this: IncomingMessage, socket: Socket): void {
    incoming.call(this, socket);
  }
  AppRequest.prototype = app.request;
  function AppResponse(this: ServerResponse, ...args: unknown[]): void {
    response.apply(this, args);
  }
  AppResponse.prototype = app.response;
  return createServer(
    {
      IncomingMessage: AppRequest as unknown as typeof IncomingMessage,
      ServerResponse: AppResponse as unknown as typeof ServerResponse,
    },
    app,
  );
}

/** A `class` constructor cannot be called on an object of ours: then express does as it always did. */
function isClass(fn: unknown): boolean {
  return typeof fn !== 'function' || Function.prototype.toString.call(fn).startsWith('class');
}
