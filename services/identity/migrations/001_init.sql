-- Organisations, users, memberships and every kind of bearer token.
-- Tokens are stored only as SHA-256 hex hashes of the whole bearer string.

create table identity.orgs (
  id uuid primary key,
  name text not null,
  modules text[] not null default '{}',
  rate_per_minute integer not null default 120 check (rate_per_minute > 0),
  rate_per_hour integer not null default 5000 check (rate_per_hour > 0),
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint orgs_modules_check check (modules <@ array['lab_equipment', 'analytics_qc', 'sample_intake']::text[])
);

create table identity.departments (
  id uuid primary key,
  org_id uuid not null references identity.orgs (id),
  name text not null,
  created_at timestamptz not null default now(),
  -- target of the memberships foreign key that keeps a department inside its org
  unique (org_id, id)
);

create table identity.users (
  id uuid primary key,
  email text not null,
  name text,
  password_hash text,
  created_at timestamptz not null default now()
);
create unique index users_email_key on identity.users (lower(email));

create table identity.memberships (
  org_id uuid not null references identity.orgs (id),
  user_id uuid not null references identity.users (id),
  role text not null check (role in ('admin', 'dept_admin', 'researcher', 'qm', 'viewer')),
  department_id uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  primary key (org_id, user_id),
  foreign key (org_id, department_id) references identity.departments (org_id, id)
);
create index memberships_user_idx on identity.memberships (user_id);

create table identity.tokens (
  id uuid primary key,
  kind text not null,
  token_hash text not null unique check (token_hash ~ '^[0-9a-f]{64}$'),
  name text,
  -- the organisation the token is bound to (API keys, bound PATs); null = unbound
  org_id uuid references identity.orgs (id),
  user_id uuid references identity.users (id),
  scopes text[] not null default '{}',
  connector_id uuid,
  device_ids uuid[] not null default '{}',
  -- one user sign-in: the refresh and access tokens issued by it and by its refreshes
  session_id uuid,
  expires_at timestamptz,
  revoked_at timestamptz,
  created_at timestamptz not null default now(),
  last_used_at timestamptz,
  constraint tokens_kind_check check (kind in ('api_key', 'pat', 'session', 'refresh')),
  constraint tokens_session_check check ((kind in ('session', 'refresh')) = (session_id is not null))
);
create index tokens_user_idx on identity.tokens (user_id);
create index tokens_session_idx on identity.tokens (session_id) where session_id is not null;
