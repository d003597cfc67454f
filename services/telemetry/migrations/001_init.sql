-- Telemetry: environmental points and readings, connectors, devices, results and
-- their raw files. Every table carries org_id and every reference includes it
-- (composite foreign keys), so a row can never point into another organisation.

create table telemetry.environmental_points (
  id uuid primary key,
  org_id uuid not null,
  external_code text,
  parameter text not null,
  unit text not null,
  limit_min double precision,
  limit_max double precision,
  room_id uuid,
  equipment_id uuid,
  active boolean not null default true,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  unique (org_id, id),
  constraint environmental_points_external_code_key unique (org_id, external_code),
  constraint environmental_points_limits_order check (limit_min is null or limit_max is null or limit_min <= limit_max)
);

create table telemetry.environmental_readings (
  id uuid primary key,
  org_id uuid not null,
  point_id uuid not null,
  value double precision not null,
  unit text not null,
  -- copied from the point when the reading is stored: later limit changes do not re-judge it
  limit_min double precision,
  limit_max double precision,
  -- set by the database, so every insert path (API, manual entry, import) judges alike
  is_breach boolean generated always as (
    (limit_min is not null and value < limit_min) or (limit_max is not null and value > limit_max)
  ) stored,
  measured_at timestamptz not null,
  sample_id uuid,
  notes text,
  created_by uuid,
  created_at timestamptz not null default now(),
  foreign key (org_id, point_id) references telemetry.environmental_points (org_id, id) on delete cascade
);
create index environmental_readings_point_idx on telemetry.environmental_readings (org_id, point_id, measured_at desc);
create index environmental_readings_time_idx on telemetry.environmental_readings (org_id, measured_at desc, id desc);
create index environmental_readings_breach_idx on telemetry.environmental_readings (org_id, measured_at desc) where is_breach;

create table telemetry.connectors (
  id uuid primary key,
  org_id uuid not null,
  name text not null,
  version text,
  host text,
  last_seen_at timestamptz,
  created_by uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  unique (org_id, id),
  constraint connectors_name_key unique (org_id, name)
);

create table telemetry.devices (
  id uuid primary key,
  org_id uuid not null,
  name text not null,
  identifier text not null,
  kind text,
  manufacturer text,
  model text,
  serial_number text,
  connector_id uuid,
  metadata jsonb not null default '{}'::jsonb,
  created_by uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  unique (org_id, id),
  constraint devices_identifier_key unique (org_id, identifier),
  foreign key (org_id, connector_id) references telemetry.connectors (org_id, id) on delete set null (connector_id)
);
create index devices_connector_idx on telemetry.devices (org_id, connector_id);

create table telemetry.raw_files (
  id uuid primary key,
  org_id uuid not null,
  device_id uuid,
  filename text not null,
  content_type text not null,
  size bigint not null,
  sha256 text not null,
  storage_key text not null,
  created_by uuid,
  created_at timestamptz not null default now(),
  unique (org_id, id)
);

create table telemetry.results (
  id uuid primary key,
  org_id uuid not null,
  -- results outlive their device: deleting a device keeps its measurements
  device_id uuid,
  sample_id uuid,
  sample_ref text,
  measured_at timestamptz not null,
  "values" jsonb not null default '[]'::jsonb,
  metadata jsonb not null default '{}'::jsonb,
  raw_file_id uuid,
  created_by uuid,
  created_at timestamptz not null default now(),
  foreign key (org_id, device_id) references telemetry.devices (org_id, id) on delete set null (device_id),
  foreign key (org_id, raw_file_id) references telemetry.raw_files (org_id, id)
);
create index results_device_idx on telemetry.results (org_id, device_id, measured_at desc);
create index results_time_idx on telemetry.results (org_id, measured_at desc, id desc);
create index results_sample_idx on telemetry.results (org_id, sample_id);
