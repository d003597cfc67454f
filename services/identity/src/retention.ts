import { sql, type SQL } from 'drizzle-orm';
import { deleteInBatches, type Database } from '@lab/kit';

/**
 * Retention of expired credentials (run by the kit's hourly housekeeping).
 *
 * Only the kinds that always carry an expiry go: sign-in and OAuth access and
 * refresh tokens, two new rows per sign-in and per refresh. API keys and PATs
 * have no expiry and stay even when revoked: people create them one at a time,
 * and whether a revoked one may be forgotten is a product decision not yet made.
 *
 * The list is literal SQL, not a parameter, and equals the predicate of
 * tokens_expiring_idx (003), so the planner can prove the partial index applies.
 */
const EXPIRING_KINDS = sql.raw(`kind in ('session', 'refresh', 'oauth', 'oauth_refresh')`);

/** The tokens purgeExpiredTokens deletes (exported so a test can check the index serves it). */
export const expiredTokens = (graceDays: number): SQL => sql`${EXPIRING_KINDS} and expires_at < now() - (${graceDays} * interval '1 day')`;

/**
 * Days a short-lived token is kept past expires_at. Refresh-token reuse
 * detection needs no deleted row: purging goes by expires_at only, so a rotated
 * (revoked) refresh token stays for its whole lifetime, and past it a sign-in
 * refresh token is refused as expired before reuse is even looked at. The grace
 * keeps a late replay answering as before for a while: an expired, rotated OAuth
 * refresh token still ends its grant (refreshOAuthToken checks reuse before
 * expiry) until it is purged; after that it is just invalid_grant.
 */
const TOKEN_GRACE_DAYS = 7;
/** Days an OAuth code (lifetime at most 10 minutes, used or not) is kept past expires_at. */
const CODE_GRACE_DAYS = 1;

/**
 * Deletes short-lived tokens expired longer than their grace, in batches of
 * short transactions (`batch`: rows per statement, tests shrink it). OAuth
 * grants stay: tokens and codes point at them, they are one row per consent, and
 * a revoked grant is the record of why its tokens stopped.
 */
export const purgeExpiredTokens = (db: Database, batch?: number): Promise<number> =>
  deleteInBatches(db, 'identity.tokens', expiredTokens(TOKEN_GRACE_DAYS), batch);

/**
 * Spent consent forms (oauth-forms.ts), each gone once it has expired: an
 * expired form is refused by its signed state alone, so the row proves nothing more.
 */
export const purgeUsedForms = (db: Database): Promise<number> => deleteInBatches(db, 'identity.oauth_used_forms', sql`expires_at < now()`);

/** One code per authorization, each gone a day after its expiry: the table stays small enough to scan without an index. */
export const purgeExpiredCodes = (db: Database): Promise<number> =>
  deleteInBatches(db, 'identity.oauth_codes', sql`expires_at < now() - (${CODE_GRACE_DAYS} * interval '1 day')`);
