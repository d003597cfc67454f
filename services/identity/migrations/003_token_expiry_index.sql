-- The hourly retention pass (src/retention.ts) deletes short-lived tokens by
-- expires_at. Without an index each pass would scan the whole tokens table,
-- which grows by two rows per sign-in and per refresh. Partial: API keys and
-- PATs have no expiry and are never purged. The predicate must stay identical
-- to EXPIRING_KINDS in retention.ts. "if not exists": on a big table an operator
-- may build it beforehand with CREATE INDEX CONCURRENTLY under this name, since
-- migrations run inside a transaction and would block writes while it builds.
create index if not exists tokens_expiring_idx on identity.tokens (expires_at)
  where kind in ('session', 'refresh', 'oauth', 'oauth_refresh');
