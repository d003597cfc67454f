-- Files kept in the database: raw result files (raw_files.storage_key), so that every replica reads
-- what any replica wrote without a shared volume: the tables of the kit's
-- PgFileStore (libs/kit/src/file-store.ts). A file is readable once complete;
-- its bytes are chunks of up to 512 KiB in order of seq.
create table telemetry.stored_files (
  id uuid primary key,
  key text not null,
  complete boolean not null,
  size bigint not null,
  sha256 text not null,
  created_at timestamptz not null default now()
);
-- one complete file per key; incomplete ones (writes under way) are many
create unique index stored_files_key_idx on telemetry.stored_files (key) where complete;
-- the sweep of writes whose process died
create index stored_files_incomplete_idx on telemetry.stored_files (created_at) where not complete;

create table telemetry.stored_file_chunks (
  file_id uuid not null references telemetry.stored_files (id) on delete cascade,
  seq integer not null,
  data bytea not null,
  primary key (file_id, seq)
);
-- the bytes are mostly compressed already (zip, gzip) or near random (base64
-- peaks): stored out of line without another compression attempt
alter table telemetry.stored_file_chunks alter column data set storage external;
