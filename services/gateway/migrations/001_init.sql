-- Idempotency records of write requests, keyed by (organisation, token, client key).
-- A row is claimed 'in_progress' by INSERT ... ON CONFLICT DO NOTHING, so of two
-- concurrent duplicates exactly one runs; the outcome is stored for replays.
create table gateway.idempotency (
  org_id uuid not null,
  token_id text not null,
  key text not null,
  request_hash text not null,
  state text not null check (state in ('in_progress', 'done')),
  response_status integer,
  response_body text,
  content_type text,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  primary key (org_id, token_id, key)
);
create index idempotency_created_idx on gateway.idempotency (created_at);
