import { createHmac, timingSafeEqual } from 'node:crypto';
import { DomainError } from '@lab/kit';

/** The spec's signature scheme, used for outbound deliveries and inbound events alike. */
const SIGNATURE_TOLERANCE_S = 300;

const hmacHex = (secret: string, t: string, body: Buffer) => createHmac('sha256', secret).update(`${t}.`).update(body).digest('hex');

/**
 * `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">` over exactly the
 * bytes sent, one v1 per secret: during a rotation's overlap the new secret's
 * first, then the replaced one's (the spec's rotation rule: one match suffices).
 */
export function signatureHeader(secrets: string | readonly string[], body: Buffer, nowSeconds = Math.floor(Date.now() / 1000)): string {
  const t = String(nowSeconds);
  const all = typeof secrets === 'string' ? [secrets] : secrets;
  return [`t=${t}`, ...all.map((s) => `v1=${hmacHex(s, t, body)}`)].join(',');
}

export interface ParsedSignature {
  t: string;
  v1: string[];
}

const badHeader = (message: string) => DomainError.invalid(message, { header: 'X-Service-Signature' }, 'invalid_signature_header');

/**
 * Parses a signature header: comma-separated parts, whitespace trimmed; exactly
 * one `t=` of digits only, at least one `v1=` of 64 hex characters (two during
 * a secret rotation). Unknown parts (future schemes) are ignored.
 */
export function parseSignatureHeader(header: string): ParsedSignature {
  if (header.length > 2_000) throw badHeader('signature header too long');
  const ts: string[] = [];
  const v1: string[] = [];
  for (const raw of header.split(',')) {
    const part = raw.trim();
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    const key = part.slice(0, eq).trim();
    const value = part.slice(eq + 1).trim();
    if (key === 't') ts.push(value);
    else if (key === 'v1') v1.push(value);
  }
  if (ts.length !== 1) throw badHeader(ts.length ? 'more than one t= part' : 'missing t= part');
  if (!/^\d{1,12}$/.test(ts[0]!)) throw badHeader('t= must be unix seconds (digits only)');
  if (!v1.length) throw badHeader('missing v1= part');
  if (v1.some((v) => !/^[0-9a-fA-F]{64}$/.test(v))) throw badHeader('v1= must be 64 hexadecimal characters');
  return { t: ts[0]!, v1: v1.map((v) => v.toLowerCase()) };
}

export interface VerifyInput {
  /** the endpoint's secret, or its secrets during a rotation's overlap (any may match) */
  secret: string | readonly string[];
  body: Buffer;
  signature: string | undefined;
  /** X-Service-Timestamp, when sent */
  timestamp: string | undefined;
  nowSeconds?: number;
}

const invalid = (message: string) => new DomainError('unauthenticated', 'invalid_signature', message);

/**
 * Verifies before anything parses the body. A malformed header is a request
 * error (400); a well-formed header that does not match, or a timestamp
 * outside the tolerance, is 401. Every v1 is compared in constant time.
 */
export function verifySignature(input: VerifyInput): void {
  if (input.signature === undefined || input.signature.trim() === '') throw invalid('missing X-Service-Signature header');
  const parsed = parseSignatureHeader(input.signature);
  const now = input.nowSeconds ?? Math.floor(Date.now() / 1000);
  if (input.timestamp !== undefined) {
    const ts = input.timestamp.trim();
    if (!/^\d{1,12}$/.test(ts)) {
      throw DomainError.invalid('X-Service-Timestamp must be unix seconds', { header: 'X-Service-Timestamp' }, 'invalid_signature_header');
    }
    if (ts !== parsed.t) throw invalid('X-Service-Timestamp does not match the signature timestamp');
  }
  if (Math.abs(now - Number(parsed.t)) > SIGNATURE_TOLERANCE_S) throw invalid('signature timestamp outside the 300 second tolerance');
  const secrets = typeof input.secret === 'string' ? [input.secret] : input.secret;
  let ok = false;
  for (const secret of secrets) {
    const expected = Buffer.from(hmacHex(secret, parsed.t, input.body), 'hex');
    for (const v of parsed.v1) {
      // no early exit: every candidate is compared with every secret
      if (timingSafeEqual(expected, Buffer.from(v, 'hex'))) ok = true;
    }
  }
  if (!ok) throw invalid('signature does not match');
}
