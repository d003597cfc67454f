-- Equipment and its records: usage sessions, maintenance logs, calibrations,
-- qualifications and the remote link. Every table carries org_id; every query
-- of the service filters by it. Child records reference (org_id, equipment_id)
-- so that a record can never hang under equipment of another organisation.

create table equipment.equipment (
  id uuid primary key,
  org_id uuid not null,
  name text not null,
  manufacturer text,
  model text,
  serial_number text,
  status text not null default 'available',
  location text,
  notes text,
  tags text[] not null default '{}',
  department_id uuid,
  room_id uuid,
  storage_location_id uuid,
  last_maintenance_date date,
  next_maintenance_date date,
  created_by uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint equipment_org_id_key unique (org_id, id)
);
create index equipment_org_created_idx on equipment.equipment (org_id, created_at, id);
create index equipment_org_status_idx on equipment.equipment (org_id, status);
create index equipment_org_department_idx on equipment.equipment (org_id, department_id);
create index equipment_org_room_idx on equipment.equipment (org_id, room_id);
create index equipment_org_next_maintenance_idx on equipment.equipment (org_id, next_maintenance_date);

create table equipment.usage_sessions (
  id uuid primary key,
  org_id uuid not null,
  equipment_id uuid not null,
  user_id uuid,
  started_at timestamptz not null default now(),
  ended_at timestamptz,
  -- whole minutes, rounded; null while the session is open
  duration_minutes integer generated always as
    (round(extract(epoch from (ended_at - started_at)) / 60)::integer) stored,
  auto_closed boolean not null default false,
  purpose text,
  project_id uuid,
  entry_id uuid,
  settings jsonb not null default '{}',
  notes text,
  created_by uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint usage_sessions_equipment_fkey foreign key (org_id, equipment_id)
    references equipment.equipment (org_id, id) on delete cascade,
  constraint usage_sessions_ended_after_start check (ended_at is null or ended_at >= started_at)
);
-- At most one open session per equipment: the index, not a read-then-insert,
-- decides between concurrent starts.
create unique index usage_sessions_one_open_idx on equipment.usage_sessions (equipment_id) where ended_at is null;
create index usage_sessions_parent_idx on equipment.usage_sessions (org_id, equipment_id, started_at);
-- what the auto-close sweep scans
create index usage_sessions_open_idx on equipment.usage_sessions (started_at) where ended_at is null;

create table equipment.maintenance_logs (
  id uuid primary key,
  org_id uuid not null,
  equipment_id uuid not null,
  maintenance_type text not null,
  severity text not null default 'normal',
  scheduled_date date,
  completed_date date,
  next_maintenance_date date,
  description text,
  result text,
  performed_by uuid,
  -- the date the from/to query bounds: when it was done, else when it is due
  log_date date generated always as (coalesce(completed_date, scheduled_date)) stored,
  created_by uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint maintenance_logs_equipment_fkey foreign key (org_id, equipment_id)
    references equipment.equipment (org_id, id) on delete cascade,
  constraint maintenance_logs_type_check check (maintenance_type in ('scheduled', 'unscheduled', 'repair', 'inspection')),
  constraint maintenance_logs_severity_check check (severity in ('low', 'normal', 'high', 'critical'))
);
create index maintenance_logs_parent_idx on equipment.maintenance_logs (org_id, equipment_id, created_at);

-- Calibrations and qualifications are free-form documents (`data`) under the
-- common record fields.
create table equipment.calibrations (
  id uuid primary key,
  org_id uuid not null,
  equipment_id uuid not null,
  data jsonb not null default '{}',
  created_by uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint calibrations_equipment_fkey foreign key (org_id, equipment_id)
    references equipment.equipment (org_id, id) on delete cascade
);
create index calibrations_parent_idx on equipment.calibrations (org_id, equipment_id, created_at);

create table equipment.qualifications (
  id uuid primary key,
  org_id uuid not null,
  equipment_id uuid not null,
  data jsonb not null default '{}',
  created_by uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint qualifications_equipment_fkey foreign key (org_id, equipment_id)
    references equipment.equipment (org_id, id) on delete cascade
);
create index qualifications_parent_idx on equipment.qualifications (org_id, equipment_id, created_at);

-- One remote link per equipment (a link record, not a remote-control channel).
create table equipment.remote_links (
  id uuid primary key,
  org_id uuid not null,
  equipment_id uuid not null,
  url text not null,
  protocol text not null default 'http',
  label text,
  notes text,
  enabled boolean not null default true,
  created_by uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint remote_links_equipment_key unique (equipment_id),
  constraint remote_links_equipment_fkey foreign key (org_id, equipment_id)
    references equipment.equipment (org_id, id) on delete cascade
);
