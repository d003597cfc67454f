import type { Request } from 'express';
import type { identity, records } from '@lab/contracts';
import type { CallerContext, Logger, RpcClient } from '@lab/kit';
import type { RateLimiter } from '@lab/rate-limits';
import type { ClientDocuments } from './client-documents.js';
import type { StateSigner } from './signed-state.js';

/**
 * The ports of the functions base: what a function needs of the request it
 * answers and of the runtime that mounts it. The gateway implements them with
 * its own authentication, counter store and gRPC clients; the functions keep the
 * rules of OAuth and MCP, count their doors with @lab/rate-limits, and import
 * nothing of the gateway.
 */

/** The request a function answers. The gateway's request context is one, passed as it is. */
export interface FunctionRequest {
  req: Request;
  requestId: string;
  /** the parsed body (JSON or form), or undefined when none was sent */
  body: unknown;
  /** who calls, set by FunctionsHost.authenticateUser (the runtime reads them, as for any authenticated route) */
  principal?: identity.Principal;
  caller?: CallerContext;
  /** the count of the caller's token, for the X-RateLimit-* headers */
  rate?: { limit: number; remaining: number };
}

/** The gRPC clients the functions call: identity (clients, grants, codes, tokens, users) and the record services (the MCP tools). */
export interface FunctionClients {
  identity(): RpcClient<typeof identity.IdentityServiceService>;
  records(service: string): RpcClient<typeof records.RecordServiceService>;
  /** whether this deployment serves `service` */
  has(service: string): boolean;
}

/** What the runtime lends the functions. */
export interface FunctionsHost {
  log: Logger;
  clients: FunctionClients;
  /** signs the state of the authorization pages (every replica holds the same key) */
  oauthState: StateSigner;
  /** the client's address, as the trusted proxies report it */
  clientAddress(req: Request): string;
  /** client ID metadata documents, fetched and cached (one cache per process) */
  clientDocuments: ClientDocuments;
  /** the runtime's counter store (Redis or memory, as deployed), which the functions' doors count on like every other door */
  limiter: RateLimiter;
  /**
   * Authenticates the request as a signed-in user whose token is for `audience`
   * (RFC 8707) and counts it against the token's limit, as any bearer request
   * is; sets the request's principal, caller and rate. An unauthenticated
   * DomainError when the token is missing, unknown or for another audience.
   */
  authenticateUser(request: FunctionRequest, audience: string): Promise<{ principal: identity.Principal; caller: CallerContext }>;
  /** Stops honouring these tokens in this process now (a refresh rotated them out), not when their revocation event arrives. */
  dropTokens(tokenIds: readonly string[]): void;
}
