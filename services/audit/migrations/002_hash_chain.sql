-- Tamper-evident audit trail. Every organisation's entries (and the entries of no
-- organisation: users, OAuth clients) form one hash chain: entry n carries its
-- sequence number, the hash of entry n-1 and its own hash, a SHA-256 over its
-- content including that previous hash. An edited entry no longer matches its
-- hash; a deleted or moved one breaks the sequence or the link to the next.
--
-- The chain is extended by a trigger in the inserting transaction, under a row
-- lock on the chain's head: concurrent inserts of one organisation take turns,
-- those of different organisations do not wait for each other.

-- Why a change was made (amendments) and what a signature means (authorship,
-- review, approval): part of the entry, so part of its hash.
alter table audit.records add column reason text;
alter table audit.records add column meaning text;
alter table audit.records add column seq bigint;
alter table audit.records add column prev_hash text;
alter table audit.records add column hash text;

-- The last entry of each chain. A chain of entries without an organisation is
-- keyed by the nil UUID.
create table audit.chain_heads (
  chain_org uuid primary key,
  seq bigint not null,
  hash text not null
);

-- The hash of an entry: SHA-256 (hex) of the jsonb text of its content. jsonb
-- text is canonical: keys sorted (by length, then bytewise), no duplicates, one
-- fixed spacing, so the same content always gives the same bytes. Timestamps are
-- written in UTC with microseconds, independent of the session's time zone.
create function audit.entry_hash(r audit.records) returns text
language sql stable as $$
  select encode(sha256(convert_to(jsonb_build_object(
    'id', r.id,
    'org_id', r.org_id,
    'seq', r.seq,
    'prev_hash', r.prev_hash,
    'created_at', to_char(r.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'occurred_at', to_char(r.occurred_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'service', r.service,
    'action', r.action,
    'resource', r.resource,
    'record_id', r.record_id,
    'actor_user_id', r.actor_user_id,
    'actor_token_id', r.actor_token_id,
    'token_kind', r.token_kind,
    'changed_fields', to_jsonb(r.changed_fields),
    'before', r.before,
    'after', r.after,
    'request_id', r.request_id,
    'reason', r.reason,
    'meaning', r.meaning
  )::text, 'UTF8')), 'hex')
$$;

create function audit.chain_entry() returns trigger
language plpgsql as $$
declare
  k uuid := coalesce(new.org_id, '00000000-0000-0000-0000-000000000000'::uuid);
  head audit.chain_heads%rowtype;
begin
  insert into audit.chain_heads (chain_org, seq, hash) values (k, 0, repeat('0', 64))
    on conflict (chain_org) do nothing;
  select * into head from audit.chain_heads where chain_org = k for update;
  -- A redelivered message whose first copy was stored while this one waited for
  -- the head (or earlier in the same statement): skipped here, before it takes a
  -- sequence number, so the chain never counts an entry that is not stored.
  if exists (select 1 from audit.records where id = new.id) then
    return null;
  end if;
  new.seq := head.seq + 1;
  new.prev_hash := head.hash;
  new.hash := audit.entry_hash(new);
  update audit.chain_heads set seq = new.seq, hash = new.hash where chain_org = k;
  return new;
end
$$;

-- Entries stored before the chain existed are chained once, in the order the log
-- is read in (created_at, id).
do $$
declare
  r audit.records%rowtype;
  k uuid;
  head audit.chain_heads%rowtype;
begin
  for r in select * from audit.records order by coalesce(org_id, '00000000-0000-0000-0000-000000000000'::uuid), created_at, id loop
    k := coalesce(r.org_id, '00000000-0000-0000-0000-000000000000'::uuid);
    insert into audit.chain_heads (chain_org, seq, hash) values (k, 0, repeat('0', 64)) on conflict (chain_org) do nothing;
    select * into head from audit.chain_heads where chain_org = k;
    r.seq := head.seq + 1;
    r.prev_hash := head.hash;
    r.hash := audit.entry_hash(r);
    update audit.records set seq = r.seq, prev_hash = r.prev_hash, hash = r.hash where id = r.id;
    update audit.chain_heads set seq = r.seq, hash = r.hash where chain_org = k;
  end loop;
end
$$;

alter table audit.records alter column seq set not null;
alter table audit.records alter column prev_hash set not null;
alter table audit.records alter column hash set not null;

create trigger records_chain before insert on audit.records
  for each row execute function audit.chain_entry();

-- The chain's order, walked by verification in pages.
create unique index records_org_seq_idx on audit.records (org_id, seq);
