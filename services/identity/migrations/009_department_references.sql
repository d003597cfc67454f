-- "A department that records still name cannot be deleted", kept where the
-- department is (decision 056). The record services hold a department before a
-- write that names it; their committed writes come back as department_ref.changed
-- events (from their outbox, so exactly the writes that committed), counted here
-- per resource in the transaction that also lets go of the write's hold. A
-- department is in use while it has a hold or a positive count; both rows keep
-- it by foreign key, so a hold taken and a deletion at the same moment take turns
-- on the department's row.
create table identity.department_holds (
  id uuid primary key,
  org_id uuid not null,
  department_id uuid not null,
  resource text not null,
  created_at timestamptz not null default now(),
  foreign key (org_id, department_id) references identity.departments (org_id, id) on delete cascade
);
create index department_holds_department_idx on identity.department_holds (org_id, department_id);

-- Records naming the department, per resource of the owning service. A count can
-- be below zero for a moment (a record's move away counted before its creation,
-- events are not ordered across relay batches); the creation's hold covers it.
create table identity.department_refs (
  org_id uuid not null,
  department_id uuid not null,
  resource text not null,
  n integer not null,
  primary key (org_id, department_id, resource),
  foreign key (org_id, department_id) references identity.departments (org_id, id) on delete cascade
);
