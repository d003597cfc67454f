-- Lab orders (module sample_intake): orders, the samples linked to them (the
-- samples themselves live in the notebook service; only their ids and the
-- order-specific fields are kept here) and the results recorded for them.
-- Every table carries org_id; every query of the service filters by it.

create table orders.lab_orders (
  id uuid primary key,
  org_id uuid not null,
  external_order_number text not null,
  -- receiving: stored, samples being created; received: samples created and
  -- linked; failed: a sample could not be created (see error)
  status text not null default 'receiving' check (status in ('receiving', 'received', 'failed')),
  priority text not null default 'routine' check (priority in ('routine', 'urgent', 'stat')),
  requester_name text not null,
  requester_email text,
  requester_organisation text,
  notes text,
  -- {code, message, sample_index} of the failure of a failed order
  error jsonb,
  sample_count integer not null default 0,
  created_by uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  received_at timestamptz,
  constraint lab_orders_org_id_key unique (org_id, id)
);
-- A failed order does not hold its number, so the client can send it again.
create unique index lab_orders_number_key on orders.lab_orders (org_id, external_order_number) where status <> 'failed';
create index lab_orders_org_created_idx on orders.lab_orders (org_id, created_at desc, id desc);
create index lab_orders_org_status_idx on orders.lab_orders (org_id, status);

create table orders.order_samples (
  org_id uuid not null,
  order_id uuid not null,
  -- the notebook sample's id
  sample_id uuid not null,
  -- place of the sample in the order body (0-based)
  position integer not null,
  name text not null,
  type text,
  external_sample_id text,
  created_at timestamptz not null default now(),
  primary key (org_id, order_id, sample_id),
  constraint order_samples_position_key unique (org_id, order_id, position),
  constraint order_samples_sample_key unique (org_id, sample_id),
  constraint order_samples_order_fk foreign key (org_id, order_id) references orders.lab_orders (org_id, id) on delete cascade
);

create table orders.lab_results (
  id uuid primary key,
  org_id uuid not null,
  order_id uuid not null,
  sample_id uuid not null,
  analyte text not null,
  -- a JSON number or string, as given
  value jsonb not null check (jsonb_typeof(value) in ('number', 'string')),
  unit text,
  reference_range text,
  flag text,
  measured_at timestamptz,
  status text not null default 'recorded' check (status in ('recorded', 'released')),
  released_at timestamptz,
  released_by uuid,
  created_by uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint lab_results_sample_fk foreign key (org_id, order_id, sample_id)
    references orders.order_samples (org_id, order_id, sample_id) on delete cascade,
  constraint lab_results_released_check check ((status = 'released') = (released_at is not null))
);
create index lab_results_org_order_idx on orders.lab_results (org_id, order_id);
create index lab_results_org_sample_idx on orders.lab_results (org_id, sample_id);
-- the released-results list, ordered by release
create index lab_results_released_idx on orders.lab_results (org_id, released_at, id) where status = 'released';
