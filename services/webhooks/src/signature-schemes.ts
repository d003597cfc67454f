import { createHmac, randomBytes } from 'node:crypto';
import { randomToken } from '@lab/kit';
import { signatureHeader } from './signature.js';

/**
 * How a subscription's deliveries are signed. `x-service-signature` is the
 * specification's scheme and every subscription's default; `standard-webhooks`
 * follows the Standard Webhooks specification (standardwebhooks.com), so a
 * receiver can verify with one of its libraries.
 */
export const SIGNATURE_SCHEMES = ['x-service-signature', 'standard-webhooks'] as const;
export type SignatureScheme = (typeof SIGNATURE_SCHEMES)[number];
export const DEFAULT_SIGNATURE_SCHEME: SignatureScheme = 'x-service-signature';

const WHSEC = 'whsec_';
/** Standard Webhooks asks for 24 to 64 key bytes; 32 are drawn. */
const STANDARD_MIN_KEY_BYTES = 24;
const STANDARD_MAX_KEY_BYTES = 64;
const STANDARD_KEY_BYTES = 32;
// standard (not url-safe) base64 with its padding: what the reference libraries decode
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/**
 * The HMAC key of a Standard Webhooks secret (`whsec_<base64>`): the decoded
 * base64 part, or undefined when the secret is not one (bad base64, too short
 * or too long a key).
 */
export function standardKey(secret: string): Buffer | undefined {
  if (!secret.startsWith(WHSEC)) return undefined;
  const b64 = secret.slice(WHSEC.length);
  if (!BASE64.test(b64)) return undefined;
  const key = Buffer.from(b64, 'base64');
  return key.length >= STANDARD_MIN_KEY_BYTES && key.length <= STANDARD_MAX_KEY_BYTES ? key : undefined;
}

/** Why a caller's secret does not fit the scheme, or undefined when it does. */
export function secretProblem(scheme: SignatureScheme, secret: string): string | undefined {
  if (scheme === 'standard-webhooks' && !standardKey(secret)) {
    return `must be whsec_ followed by the standard base64 of ${STANDARD_MIN_KEY_BYTES} to ${STANDARD_MAX_KEY_BYTES} random bytes for standard-webhooks`;
  }
  return undefined;
}

/**
 * A new secret for the scheme, prefixed so it is recognisable in a leak scan:
 * base64url for x-service-signature (the secret's characters are the key, as
 * always), standard base64 for standard-webhooks (its bytes are the key).
 */
export const generateSecretFor = (scheme: SignatureScheme): string =>
  scheme === 'standard-webhooks' ? `${WHSEC}${randomBytes(STANDARD_KEY_BYTES).toString('base64')}` : `${WHSEC}${randomToken(32)}`;

export interface DeliverySigning {
  scheme: SignatureScheme;
  /** the delivery id: Standard Webhooks' message id, the same on every attempt and redelivery */
  id: string;
  /** the current secret first, then the one a rotation replaced while it still signs */
  secrets: readonly string[];
  body: Buffer;
  nowSeconds?: number;
}

/**
 * The signature headers of one attempt, made now over exactly the bytes sent:
 * one signature per secret, so during a rotation's overlap a receiver holding
 * either secret verifies.
 */
export function signatureHeaders(s: DeliverySigning): Record<string, string> {
  const now = s.nowSeconds ?? Math.floor(Date.now() / 1000);
  if (s.scheme === 'x-service-signature') return { 'X-Service-Signature': signatureHeader(s.secrets, s.body, now) };
  const t = String(now);
  const signatures = s.secrets
    // a secret that is no Standard Webhooks key cannot sign here (none is stored so; a guard, not a rule)
    .flatMap((secret) => standardKey(secret) ?? [])
    .map((key) => `v1,${createHmac('sha256', key).update(`${s.id}.${t}.`).update(s.body).digest('base64')}`);
  return { 'webhook-id': s.id, 'webhook-timestamp': t, 'webhook-signature': signatures.join(' ') };
}
