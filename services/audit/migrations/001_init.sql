-- Audit log: one row per audited write of any service, keyed by the id of the
-- audit.record message, so a redelivered message is a no-op (ON CONFLICT).
create table audit.records (
  id uuid primary key,
  org_id uuid,
  -- when the audit service stored it: the keyset paging order
  created_at timestamptz not null default clock_timestamp(),
  -- when the write happened in the owning service
  occurred_at timestamptz not null,
  service text not null,
  action text not null,
  resource text not null,
  record_id text,
  actor_user_id uuid,
  actor_token_id uuid,
  token_kind text not null,
  changed_fields text[] not null default '{}',
  before jsonb,
  after jsonb,
  request_id text
);

-- Keyset paging within one organisation: (org_id, created_at, id).
create index records_org_keyset_idx on audit.records (org_id, created_at, id);
