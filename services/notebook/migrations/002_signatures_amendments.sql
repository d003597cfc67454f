-- Signed records: versions (amendments of a signed entry) and signature manifests.

-- An amendment is a new experiment record: the next version of the same entry
-- (same display_id), linked to the signed version it amends, with the reason.
alter table notebook.experiments add column version integer not null default 1;
alter table notebook.experiments add column amends_id uuid;
alter table notebook.experiments add column amendment_reason text;

-- display_id names the entry; each of its versions is one record.
alter table notebook.experiments drop constraint experiments_display_id_key;
alter table notebook.experiments add constraint experiments_display_id_key unique (org_id, display_id, version);
-- a signed version is amended once: its history is a line, never a fork
create unique index experiments_amends_idx on notebook.experiments (org_id, amends_id) where amends_id is not null;

-- One row per signature of an experiment version: who (id and name as at signing),
-- when (server time), what it means, and the hash of the content signed.
create table notebook.experiment_signatures (
  id uuid primary key,
  org_id uuid not null,
  experiment_id uuid not null references notebook.experiments (id) on delete restrict,
  meaning text not null check (meaning in ('authorship', 'review', 'approval')),
  signer_id uuid not null,
  signer_name text,
  signed_at timestamptz not null default now(),
  -- SHA-256 (hex) of the canonical JSON of the signed content; null only for
  -- signatures made before manifests were kept
  content_hash text,
  -- one signature of each meaning per version
  constraint experiment_signatures_meaning_key unique (experiment_id, meaning)
);
create index experiment_signatures_org_experiment_idx on notebook.experiment_signatures (org_id, experiment_id);

-- Experiments signed before manifests were kept: their signature as the record
-- holds it (authorship; no name, no content hash).
insert into notebook.experiment_signatures (id, org_id, experiment_id, meaning, signer_id, signed_at)
select gen_random_uuid(), org_id, id, 'authorship', signed_by, signed_at
from notebook.experiments where signed_at is not null and signed_by is not null;
