-- Notebook records: experiments (entries), projects, samples. Every table carries
-- org_id; every query of the service filters by it.

create table notebook.projects (
  id uuid primary key,
  org_id uuid not null,
  name text not null,
  description text,
  status text not null default 'active',
  tags text[] not null default '{}',
  department_id uuid,
  lead_researcher_id uuid,
  parent_project_id uuid,
  start_date date,
  created_by uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  -- target of the same-organisation references below
  constraint projects_org_id_key unique (org_id, id),
  constraint projects_parent_fkey foreign key (org_id, parent_project_id)
    references notebook.projects (org_id, id) on delete set null (parent_project_id)
);
create index projects_org_created_idx on notebook.projects (org_id, created_at, id);
create index projects_org_status_idx on notebook.projects (org_id, status);
create index projects_org_department_idx on notebook.projects (org_id, department_id);
create index projects_org_lead_idx on notebook.projects (org_id, lead_researcher_id);
create index projects_org_parent_idx on notebook.projects (org_id, parent_project_id);

create table notebook.experiments (
  id uuid primary key,
  org_id uuid not null,
  display_id text not null,
  title text,
  description text,
  content jsonb not null default '{}',
  status text not null default 'draft',
  tags text[] not null default '{}',
  project_id uuid,
  template_id uuid,
  department_id uuid,
  author_id uuid,
  signed_at timestamptz,
  signed_by uuid,
  created_by uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint experiments_display_id_key unique (org_id, display_id),
  constraint experiments_project_fkey foreign key (org_id, project_id)
    references notebook.projects (org_id, id) on delete set null (project_id)
);
create index experiments_org_created_idx on notebook.experiments (org_id, created_at, id);
create index experiments_org_status_idx on notebook.experiments (org_id, status);
create index experiments_org_project_idx on notebook.experiments (org_id, project_id);
create index experiments_org_author_idx on notebook.experiments (org_id, author_id);
create index experiments_org_department_idx on notebook.experiments (org_id, department_id);

create table notebook.samples (
  id uuid primary key,
  org_id uuid not null,
  name text not null,
  type text,
  status text not null default 'registered',
  metadata jsonb not null default '{}',
  storage_location text,
  storage_location_id uuid,
  department_id uuid,
  owner_id uuid,
  created_by uuid,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);
create index samples_org_created_idx on notebook.samples (org_id, created_at, id);
create index samples_org_status_idx on notebook.samples (org_id, status);
create index samples_org_type_idx on notebook.samples (org_id, type);
create index samples_org_department_idx on notebook.samples (org_id, department_id);
create index samples_org_owner_idx on notebook.samples (org_id, owner_id);
create index samples_org_location_idx on notebook.samples (org_id, storage_location_id);

-- Per-organisation sequence behind display ids (EXP-000001): one row per org and
-- kind, bumped inside the creating transaction so numbers are never reused.
create table notebook.display_counters (
  org_id uuid not null,
  kind text not null,
  n bigint not null,
  primary key (org_id, kind)
);
