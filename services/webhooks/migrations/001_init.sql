-- Outbound webhook subscriptions and their deliveries; inbound endpoints and the
-- events they received. Every table carries org_id; every query filters by it.
-- Secrets are stored as given: signing (outbound) and verifying (inbound) an
-- HMAC needs the secret itself, a hash would not do.

create table webhooks.subscriptions (
  id uuid primary key,
  org_id uuid not null,
  url text not null,
  events text[] not null,
  secret text not null,
  active boolean not null default true,
  disabled_reason text,
  disabled_at timestamptz,
  created_at timestamptz not null default now(),
  unique (org_id, id)
);
create index subscriptions_org_active_idx on webhooks.subscriptions (org_id) where active;

-- One row per (event, matching subscription). The row is the durable schedule:
-- next_attempt_at is when it is due (and, while an attempt runs, the end of the
-- worker's lease), so deliveries survive restarts of the service and the broker.
create table webhooks.deliveries (
  id uuid primary key,
  org_id uuid not null,
  subscription_id uuid not null,
  event_id uuid not null,
  event text not null,
  data jsonb not null,
  host text not null,
  status text not null default 'pending' check (status in ('pending', 'delivered', 'failed')),
  attempts integer not null default 0,
  last_status_code integer,
  last_error text,
  next_attempt_at timestamptz,
  delivered_at timestamptz,
  failed_at timestamptz,
  created_at timestamptz not null default now(),
  foreign key (org_id, subscription_id) references webhooks.subscriptions (org_id, id) on delete cascade,
  unique (subscription_id, event_id)
);
create index deliveries_due_idx on webhooks.deliveries (next_attempt_at) where status = 'pending';
create index deliveries_subscription_idx on webhooks.deliveries (subscription_id, created_at desc);

create table webhooks.inbound_endpoints (
  id uuid primary key,
  org_id uuid not null,
  slug text not null,
  -- generated slugs are random and unique across organisations, so the short
  -- path /inbound-webhook/{slug} finds them
  slug_generated boolean not null,
  secret text not null,
  allowed_event_types text[] not null default '{}',
  job_type text,
  active boolean not null default true,
  created_at timestamptz not null default now(),
  unique (org_id, slug),
  unique (org_id, id)
);
create unique index inbound_endpoints_generated_slug_idx on webhooks.inbound_endpoints (slug) where slug_generated;
create index inbound_endpoints_slug_idx on webhooks.inbound_endpoints (slug);

create table webhooks.inbound_events (
  id uuid primary key,
  org_id uuid not null,
  endpoint_id uuid not null,
  event_type text not null,
  occurred_at timestamptz,
  external_id text,
  idempotency_key text,
  payload jsonb,
  -- set when the endpoint names a job type: the job to run for this event,
  -- 'pending' until a jobs service takes it
  job_type text,
  job_status text,
  received_at timestamptz not null default now(),
  foreign key (org_id, endpoint_id) references webhooks.inbound_endpoints (org_id, id) on delete cascade
);
create unique index inbound_events_external_idx on webhooks.inbound_events (endpoint_id, external_id) where external_id is not null;
create unique index inbound_events_idem_idx on webhooks.inbound_events (endpoint_id, idempotency_key) where idempotency_key is not null;
