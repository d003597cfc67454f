-- What the management API shows of a token instead of the token: its first
-- characters (the kind's prefix and a few of the secret's), kept when the token
-- is made. Tokens made before have none.
alter table identity.tokens add column display_prefix text;

-- A deleted OAuth client stays as a row (its grants and codes point at it, and the
-- audit log names it), marked deleted: it authenticates no more, issues nothing,
-- and is not listed.
alter table identity.oauth_clients add column deleted_at timestamptz;

-- The listing of an organisation's API keys and of a user's tokens.
create index tokens_org_kind_idx on identity.tokens (org_id, kind) where org_id is not null;
