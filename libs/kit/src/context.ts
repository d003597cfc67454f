import { AsyncLocalStorage } from 'node:async_hooks';

/**
 * Who is calling, as established by the gateway. Carried to services in gRPC
 * metadata (signed) and to consumers inside bus messages.
 */
export interface CallerContext {
  org_id: string | null;
  user_id: string | null;
  /**
   * The role of user_id in org_id and the department it belongs to there, as
   * identity set them: opaque to the mechanisms here, read by the permission
   * model (libs/permissions).
   */
  role: string | null;
  department_id: string | null;
  scopes: string[];
  /** api_key, pat, oauth, session, operator (management API), system (internal) */
  token_kind: string;
  token_id: string | null;
  request_id: string;
  /**
   * The client's Idempotency-Key, set by the gateway on the calls of a keyed
   * request. Like the request id it travels beside the signed context (it changes
   * per request); a service moves it into its call scope (`callScope`), and scopes
   * what it keeps under it by the signed org and token.
   */
  idempotency_key?: string;
  /**
   * What "the same request" means for that key: a SHA-256 of the HTTP method,
   * path and canonical body, set by the gateway beside the key. A retry whose
   * hash differs from the one its key was first used with is a conflict.
   */
  request_hash?: string;
  connector_id?: string | null;
  device_ids?: string[];
}

/** Per-async-flow state: request id and caller, read by the logger and outbox. */
export interface RequestScope {
  request_id: string;
  caller?: CallerContext;
  /** the client's Idempotency-Key of the call being served (never passed on to peers) */
  idempotency_key?: string;
  /** the hash of the keyed request (CallerContext.request_hash) */
  request_hash?: string;
  /**
   * Set on the gateway's request scope when a service answered a keyed call
   * from its receipt: the answer is a replay (Idempotent-Replay: true).
   */
  replayed?: boolean;
  /**
   * Whether a write of this keyed call has claimed its receipt (receipts.ts), and
   * whether that write kept the call's answer with it.
   */
  receipt?: 'claiming' | 'claimed' | 'answered';
  /** how the method being served writes its answers (for a receipt kept in a write's transaction) */
  encode_answer?: (answer: unknown) => Buffer;
}

export const requestScope = new AsyncLocalStorage<RequestScope>();

/** A request id taken from outside (a header, metadata) only when it is short and plain. */
export const isSaneRequestId = (v: unknown): v is string => typeof v === 'string' && /^[A-Za-z0-9._:-]{1,128}$/.test(v);

/** An Idempotency-Key as the API takes it: 8 to 200 visible ASCII characters. */
export const isSaneIdempotencyKey = (v: unknown): v is string => typeof v === 'string' && /^[\x21-\x7e]{8,200}$/.test(v);

/** A request hash as the gateway makes it: SHA-256 in hex. */
export const isSaneRequestHash = (v: unknown): v is string => typeof v === 'string' && /^[0-9a-f]{64}$/.test(v);

export function currentRequestId(): string | undefined {
  return requestScope.getStore()?.request_id;
}

/**
 * The scope a service serves a call in. The Idempotency-Key the gateway sent is
 * kept in the scope and taken out of the caller, so that it stays with this call:
 * a service that calls a peer with the same caller (creating records that a
 * peer owns) must not make the peer's writes count as the client's keyed one.
 */
export function callScope(caller: CallerContext): { scope: RequestScope; caller: CallerContext } {
  const { idempotency_key, request_hash, ...rest } = caller;
  return { scope: { request_id: caller.request_id, caller: rest, idempotency_key, request_hash }, caller: rest };
}

export function systemContext(request_id: string, org_id: string | null = null): CallerContext {
  return {
    org_id,
    user_id: null,
    role: null,
    department_id: null,
    scopes: ['*'],
    token_kind: 'system',
    token_id: null,
    request_id,
  };
}
