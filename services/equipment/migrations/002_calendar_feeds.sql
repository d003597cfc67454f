-- Calendar feeds (decision 060): a read-only view of the equipment's calendar
-- for a calendar client, which cannot send headers, so the feed URL carries a
-- token of its own. Only the token's SHA-256 is kept; the token names its row
-- by id, and the gateway's hash of it is compared with token_hash in constant
-- time. A feed of one item goes with the item.
create table equipment.calendar_feeds (
  id uuid primary key,
  org_id uuid not null,
  -- the user who made it: the feed shows what this user may read at each fetch
  created_by uuid not null,
  name text,
  equipment_id uuid,
  token_hash text not null check (token_hash ~ '^[0-9a-f]{64}$'),
  created_at timestamptz not null default now(),
  last_used_at timestamptz,
  revoked_at timestamptz,
  constraint calendar_feeds_equipment_fkey foreign key (org_id, equipment_id)
    references equipment.equipment (org_id, id) on delete cascade
);
create index calendar_feeds_creator_idx on equipment.calendar_feeds (org_id, created_by, created_at) where revoked_at is null;
