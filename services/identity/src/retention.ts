import { sql, type SQL } from 'drizzle-orm';
import { DELETE_BATCH, deleteInBatches, type Database } from '@lab/kit';

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

/** The tokens purgeExpiredCredentials deletes (exported so a test can check the index serves it). */
export const expiredTokens = (graceDays: number): SQL =>
  sql`${EXPIRING_KINDS} and expires_at < now() - (${graceDays} * interval '1 day')`;

export interface RetentionOptions {
  /**
   * Days a short-lived token is kept past expires_at. Refresh-token reuse
   * detection needs no deleted row: purging goes by expires_at only, so a rotated
   * (revoked) refresh token stays for its whole lifetime, and past it a sign-in
   * refresh token is refused as expired before reuse is even looked at. The
   * grace keeps a late replay answering as before for a while: an expired, rotated
   * OAuth refresh token still ends its grant (refreshOAuthToken checks reuse
   * before expiry) until it is purged; after that it is just invalid_grant.
   */
  tokenGraceDays?: number;
  /** Days an OAuth code (lifetime at most 10 minutes, used or not) is kept past expires_at. */
  codeGraceDays?: number;
  /** rows per delete statement */
  batch?: number;
}

/**
 * Deletes short-lived tokens and OAuth codes expired longer than their grace,
 * in batches of short transactions. OAuth grants stay: tokens and codes point at
 * them, they are one row per consent, and a revoked grant is the record of why
 * its tokens stopped.
 */
export async function purgeExpiredCredentials(db: Database, opts: RetentionOptions = {}): Promise<{ tokens: number; codes: number }> {
  const { tokenGraceDays = 7, codeGraceDays = 1, batch = DELETE_BATCH } = opts;
  const tokens = await deleteInBatches(db, 'identity.tokens', expiredTokens(tokenGraceDays), batch);
  // One code per authorization, each gone a day after its expiry: the table stays small enough to scan hourly without an index.
  const codes = await deleteInBatches(db, 'identity.oauth_codes', sql`expires_at < now() - (${codeGraceDays} * interval '1 day')`, batch);
  return { tokens, codes };
}
