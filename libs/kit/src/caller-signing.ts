import { createHmac, timingSafeEqual } from 'node:crypto';
import type { Metadata } from '@grpc/grpc-js';
import { isSaneIdempotencyKey, isSaneRequestHash, isSaneRequestId, type CallerContext } from './context.js';
import { DomainError } from './errors.js';

const CTX_KEY = 'x-lab-caller';
const SIG_KEY = 'x-lab-caller-sig';
/** The request id travels beside the signed context: it only correlates logs. */
const REQUEST_ID_KEY = 'x-lab-request-id';
/** So does the client's Idempotency-Key (see CallerContext.idempotency_key). */
const IDEMPOTENCY_KEY = 'x-lab-idempotency-key';
/** and the hash of the keyed request (CallerContext.request_hash) */
const REQUEST_HASH = 'x-lab-request-hash';
/** A signed context older than this is refused (limits replay of captured metadata). */
const MAX_AGE_MS = 5 * 60_000;
/**
 * How long a signed context is reused for the same caller. A caller's context
 * is the same on every request but for its request id, so it is signed about
 * once a minute instead of on every call, and the receiving side verifies each
 * distinct signature once (the HMAC was a good share of a read's CPU).
 */
const RESIGN_MS = 60_000;
/** Bound of each side's cache; cleared when full (a burst of distinct callers). */
const MAX_CACHED = 10_000;

type Who = Omit<CallerContext, 'request_id' | 'idempotency_key' | 'request_hash'>;

const mac = (secret: string, payload: string) => createHmac('sha256', secret).update(payload).digest('base64url');

/** Per secret: signed contexts by the caller's JSON, verified ones by payload. */
const signedBySecret = new Map<string, Map<string, { payload: string; sig: string; iat: number }>>();
const verifiedBySecret = new Map<string, Map<string, { sig: Buffer; who: Who; iat: number }>>();

function cacheOf<V>(caches: Map<string, Map<string, V>>, secret: string): Map<string, V> {
  let c = caches.get(secret);
  if (!c) caches.set(secret, (c = new Map<string, V>()));
  return c;
}

function remember<V>(cache: Map<string, V>, key: string, value: V): void {
  if (cache.size >= MAX_CACHED) cache.clear();
  cache.set(key, value);
}

/**
 * Who calls, as text: the same for every request of a caller (everything of its
 * context but the request id and the keyed request's key and hash), so calls with
 * the same key carry the same signed context.
 */
export const callerKey = (ctx: CallerContext): string => JSON.stringify(whoOf(ctx));

function whoOf(ctx: CallerContext): Who {
  const { request_id: _id, idempotency_key: _key, request_hash: _hash, ...who } = ctx;
  return who;
}

/** Puts the caller context, HMAC-signed with the internal secret, into gRPC metadata. */
export function signCallerContext(md: Metadata, ctx: CallerContext, secret: string): void {
  const { request_id, idempotency_key, request_hash } = ctx;
  const signed = cacheOf(signedBySecret, secret);
  const key = callerKey(ctx);
  const now = Date.now();
  let s = signed.get(key);
  if (!s || now - s.iat > RESIGN_MS) {
    const payload = Buffer.from(JSON.stringify({ ...whoOf(ctx), iat: now })).toString('base64url');
    s = { payload, sig: mac(secret, payload), iat: now };
    remember(signed, key, s);
  }
  md.set(CTX_KEY, s.payload);
  md.set(SIG_KEY, s.sig);
  md.set(REQUEST_ID_KEY, request_id);
  if (idempotency_key) md.set(IDEMPOTENCY_KEY, idempotency_key);
  if (idempotency_key && request_hash) md.set(REQUEST_HASH, request_hash);
}

/** Verifies and decodes the caller context; a missing or forged one is UNAUTHENTICATED. */
export function verifyCallerContext(md: Metadata, secret: string): CallerContext {
  const payload = md.get(CTX_KEY)[0];
  const sig = md.get(SIG_KEY)[0];
  if (typeof payload !== 'string' || typeof sig !== 'string') {
    throw DomainError.unauthenticated('missing caller context', 'missing_caller_context');
  }
  const given = Buffer.from(sig);
  const verified = cacheOf(verifiedBySecret, secret);
  let v = verified.get(payload);
  if (!v || v.sig.length !== given.length || !timingSafeEqual(v.sig, given)) {
    const expected = Buffer.from(mac(secret, payload));
    if (expected.length !== given.length || !timingSafeEqual(expected, given)) {
      throw DomainError.unauthenticated('forged caller context', 'invalid_caller_context');
    }
    const { iat, ...who } = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as CallerContext & { iat: number };
    v = { sig: expected, who, iat };
    remember(verified, payload, v);
  }
  if (!Number.isFinite(v.iat) || Math.abs(Date.now() - v.iat) > MAX_AGE_MS) {
    throw DomainError.unauthenticated('stale caller context', 'invalid_caller_context');
  }
  const rid = md.get(REQUEST_ID_KEY)[0];
  const request_id = isSaneRequestId(rid) ? rid : ((v.who as Partial<CallerContext>).request_id ?? '');
  const key = md.get(IDEMPOTENCY_KEY)[0];
  if (!isSaneIdempotencyKey(key)) return { ...v.who, request_id };
  const hash = md.get(REQUEST_HASH)[0];
  return isSaneRequestHash(hash) ? { ...v.who, request_id, idempotency_key: key, request_hash: hash } : { ...v.who, request_id, idempotency_key: key };
}
