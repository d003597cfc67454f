import { createHash, randomBytes } from 'node:crypto';

/**
 * Bearer token formats. Pure functions only (no database, no kit): the gateway
 * imports them to hash a bearer and to read the organisation out of an API key
 * before it asks identity anything.
 *
 *   API key        lab_<org id, 32 hex without dashes>_<43 chars base64url>
 *   PAT            pat_<43 chars base64url>
 *   session access ses_<43 chars base64url>
 *   session refresh ref_<43 chars base64url>
 *   OAuth access   oat_<43 chars base64url>
 *   OAuth refresh  ort_<43 chars base64url>
 */
export type TokenKind = 'api_key' | 'pat' | 'session' | 'refresh' | 'oauth' | 'oauth_refresh';

const PREFIX: Record<TokenKind, string> = {
  api_key: 'lab_',
  pat: 'pat_',
  session: 'ses_',
  refresh: 'ref_',
  oauth: 'oat_',
  oauth_refresh: 'ort_',
};

/** 32 random bytes: 256 bits of entropy, 43 base64url characters. */
const SECRET_BYTES = 32;
const SECRET = '[A-Za-z0-9_-]{43}';
const API_KEY_RE = new RegExp(`^lab_([0-9a-f]{32})_${SECRET}$`);
const PREFIXED_RE = new RegExp(`^(pat|ses|ref|oat|ort)_${SECRET}$`);

/** Lowercase hex SHA-256 of the whole token: the only form tokens are stored in. */
export function hashToken(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}

const secret = () => randomBytes(SECRET_BYTES).toString('base64url');

export function newApiKey(orgId: string): string {
  return `${PREFIX.api_key}${orgId.replace(/-/g, '').toLowerCase()}_${secret()}`;
}

export function newPrefixedToken(kind: Exclude<TokenKind, 'api_key'>): string {
  return `${PREFIX[kind]}${secret()}`;
}

/** OAuth client secrets (`ocs_`) and authorization codes (`oac_`): stored hashed like tokens. */
export const newClientSecret = (): string => `ocs_${secret()}`;
export const newAuthorizationCode = (): string => `oac_${secret()}`;

/** Characters of the secret kept beside the hash so an operator can tell tokens apart: 36 of 256 bits. */
const SHOWN_SECRET_CHARS = 6;

/**
 * What the management API shows of an API key or PAT in place of the token: the
 * part before the secret (kind prefix, and an API key's organisation) and the
 * secret's first characters. Short-lived sign-in and OAuth tokens keep none.
 */
export function displayPrefix(kind: TokenKind, token: string): string | null {
  if (kind === 'api_key') return token.slice(0, 'lab_'.length + 32 + 1 + SHOWN_SECRET_CHARS);
  if (kind === 'pat') return token.slice(0, 'pat_'.length + SHOWN_SECRET_CHARS);
  return null;
}

/** The organisation embedded in a well-formed API key, as a dashed UUID; else null. */
export function parseApiKeyOrg(token: string): string | null {
  const m = API_KEY_RE.exec(token);
  if (!m) return null;
  const h = m[1]!;
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** Kind of a well-formed token by its prefix; null for anything else. */
export function tokenKindOf(token: string): TokenKind | null {
  if (API_KEY_RE.test(token)) return 'api_key';
  const m = PREFIXED_RE.exec(token);
  if (!m) return null;
  return ({ pat: 'pat', ses: 'session', ref: 'refresh', oat: 'oauth', ort: 'oauth_refresh' } as const)[m[1] as 'pat' | 'ses' | 'ref' | 'oat' | 'ort'];
}
