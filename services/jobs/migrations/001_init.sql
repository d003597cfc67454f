-- Background jobs. The table is also the work queue: workers claim due rows with
-- FOR UPDATE SKIP LOCKED, keep a heartbeat while they run, and a row whose
-- heartbeat is older than the visibility timeout is taken back (its worker died).

create table jobs.jobs (
  id uuid primary key,
  org_id uuid not null,
  job_type text not null,
  input jsonb not null default '{}',
  status text not null default 'queued' check (status in ('queued', 'running', 'succeeded', 'failed', 'dead')),
  progress integer not null default 0 check (progress between 0 and 100),
  status_text text,
  result_path text,
  result_meta jsonb,
  error_message text,
  attempts integer not null default 0,
  max_attempts integer not null default 3 check (max_attempts >= 1),
  enqueued_at timestamptz not null,
  started_at timestamptz,
  finished_at timestamptz,
  -- when a queued or failed job may run (next): backoff after a failure
  run_after timestamptz not null default now(),
  heartbeat_at timestamptz,
  worker_id text,
  -- who asked, as the job's reads of other services act on their behalf
  created_by uuid,
  created_by_token_id uuid,
  creator_role text,
  creator_department_id uuid,
  updated_at timestamptz not null default now()
);

-- enqueued_at is the list cursor, so it is unique per organisation (see store.ts)
create unique index jobs_org_enqueued_idx on jobs.jobs (org_id, enqueued_at);
create index jobs_due_idx on jobs.jobs (run_after) where status in ('queued', 'failed');
create index jobs_running_idx on jobs.jobs (heartbeat_at) where status = 'running';
