import { createHmac, timingSafeEqual } from 'node:crypto';
import type { Metadata } from '@grpc/grpc-js';
import type { CallerContext } from './context.js';
import { DomainError } from './errors.js';

const CTX_KEY = 'x-lab-caller';
const SIG_KEY = 'x-lab-caller-sig';
/** A signed context older than this is refused (limits replay of captured metadata). */
const MAX_AGE_MS = 5 * 60_000;

const mac = (secret: string, payload: string) => createHmac('sha256', secret).update(payload).digest('base64url');

/** Puts the caller context, HMAC-signed with the internal secret, into gRPC metadata. */
export function signCallerContext(md: Metadata, ctx: CallerContext, secret: string): void {
  const payload = Buffer.from(JSON.stringify({ ...ctx, iat: Date.now() })).toString('base64url');
  md.set(CTX_KEY, payload);
  md.set(SIG_KEY, mac(secret, payload));
}

/** Verifies and decodes the caller context; a missing or forged one is UNAUTHENTICATED. */
export function verifyCallerContext(md: Metadata, secret: string): CallerContext {
  const payload = md.get(CTX_KEY)[0];
  const sig = md.get(SIG_KEY)[0];
  if (typeof payload !== 'string' || typeof sig !== 'string') {
    throw DomainError.unauthenticated('missing caller context', 'missing_caller_context');
  }
  const expected = Buffer.from(mac(secret, payload));
  const given = Buffer.from(sig);
  if (expected.length !== given.length || !timingSafeEqual(expected, given)) {
    throw DomainError.unauthenticated('forged caller context', 'invalid_caller_context');
  }
  const decoded = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as CallerContext & { iat: number };
  if (!Number.isFinite(decoded.iat) || Math.abs(Date.now() - decoded.iat) > MAX_AGE_MS) {
    throw DomainError.unauthenticated('stale caller context', 'invalid_caller_context');
  }
  const { iat: _iat, ...ctx } = decoded;
  return ctx;
}
