import { createHash, randomBytes } from 'node:crypto';

/**
 * The token of a calendar feed (decision 060), pure functions only: the
 * gateway imports them (`@lab/equipment/calendar-token`) to find the feed a
 * URL names and to hash the token before it asks the equipment service.
 *
 *   cal_<feed id, 32 hex without dashes>_<43 chars base64url: 256 random bits>
 *
 * The id is the selector (the row is read by its primary key); the whole
 * token's SHA-256 is the verifier, compared in constant time.
 */
const TOKEN_RE = /^cal_([0-9a-f]{32})_[A-Za-z0-9_-]{43}$/;

export function newFeedToken(feedId: string): string {
  return `cal_${feedId.replace(/-/g, '').toLowerCase()}_${randomBytes(32).toString('base64url')}`;
}

/** Lowercase hex SHA-256 of the whole token: the only form a feed token is kept in. */
export const hashFeedToken = (token: string): string => createHash('sha256').update(token, 'utf8').digest('hex');

/** The feed id a well-formed token names, as a dashed UUID; else null. */
export function feedIdOf(token: string): string | null {
  const m = TOKEN_RE.exec(token);
  if (!m) return null;
  const h = m[1]!;
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
