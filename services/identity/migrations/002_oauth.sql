-- OAuth 2.0 authorization-code flow for registered confidential clients.
-- A grant is one consent: a user, an organisation, the scopes left after the
-- role rule. Its codes, access tokens and refresh tokens all point at it, so
-- revoking the grant (reuse of a code or of a rotated refresh token) ends them all.

create table identity.oauth_clients (
  id uuid primary key,
  name text not null,
  -- SHA-256 hex of the high-entropy client secret; never the secret itself
  secret_hash text not null check (secret_hash ~ '^[0-9a-f]{64}$'),
  redirect_uris text[] not null check (cardinality(redirect_uris) between 1 and 20),
  scopes text[] not null,
  created_at timestamptz not null default now()
);

create table identity.oauth_grants (
  id uuid primary key,
  client_id uuid not null references identity.oauth_clients (id),
  user_id uuid not null references identity.users (id),
  org_id uuid not null references identity.orgs (id),
  scopes text[] not null,
  created_at timestamptz not null default now(),
  revoked_at timestamptz
);
create index oauth_grants_user_idx on identity.oauth_grants (user_id);

create table identity.oauth_codes (
  id uuid primary key,
  grant_id uuid not null references identity.oauth_grants (id),
  code_hash text not null unique check (code_hash ~ '^[0-9a-f]{64}$'),
  client_id uuid not null references identity.oauth_clients (id),
  redirect_uri text not null,
  code_challenge text,
  code_challenge_method text check (code_challenge_method in ('S256', 'plain')),
  expires_at timestamptz not null,
  used_at timestamptz
);
create index oauth_codes_grant_idx on identity.oauth_codes (grant_id);

alter table identity.tokens add column grant_id uuid references identity.oauth_grants (id);
alter table identity.tokens drop constraint tokens_kind_check;
alter table identity.tokens add constraint tokens_kind_check
  check (kind in ('api_key', 'pat', 'session', 'refresh', 'oauth', 'oauth_refresh'));
alter table identity.tokens add constraint tokens_grant_check
  check ((kind in ('oauth', 'oauth_refresh')) = (grant_id is not null));
create index tokens_grant_idx on identity.tokens (grant_id) where grant_id is not null;
