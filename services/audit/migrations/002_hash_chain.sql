-- Tamper-evident audit trail. Every organisation's entries (and the entries of no
-- organisation: users, OAuth clients) form one hash chain: entry n carries its
-- sequence number, the hash of entry n-1 and its own hash, a SHA-256 over its
-- content including that previous hash. An edited entry no longer matches its
-- hash; a deleted or moved one breaks the sequence or the link to the next.
--
-- The chain is extended by triggers in the inserting transaction, under a row
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

-- Extends the chain by one entry, before it is inserted. A chain's head row is
-- locked (FOR UPDATE, to the end of the transaction) when a transaction first
-- writes to it. The running head of the chain being written is kept in one
-- transaction-local setting rather than written back per entry: a batch would
-- otherwise leave one row version of the head per entry, each read of the head
-- walking all of them (quadratic in the batch). When the next entry belongs to
-- another chain, the running head is stored and the other chain's head read
-- (storeRecords sends a batch ordered by organisation, so that is once per
-- organisation); the statement trigger below stores the last one.
create function audit.chain_entry() returns trigger
language plpgsql as $$
declare
  k uuid := coalesce(new.org_id, '00000000-0000-0000-0000-000000000000'::uuid);
  -- '<chain>:<seq>:<hash>' of the chain this transaction wrote last
  running text[] := string_to_array(nullif(current_setting('lab_audit.running_head', true), ''), ':');
  head_seq bigint;
  head_hash text;
begin
  if running is not null and running[1]::uuid = k then
    head_seq := running[2]::bigint;
    head_hash := running[3];
  else
    if running is not null then
      update audit.chain_heads set seq = running[2]::bigint, hash = running[3] where chain_org = running[1]::uuid;
    end if;
    insert into audit.chain_heads (chain_org, seq, hash) values (k, 0, repeat('0', 64))
      on conflict (chain_org) do nothing;
    select h.seq, h.hash into head_seq, head_hash from audit.chain_heads h where h.chain_org = k for update;
  end if;
  -- A redelivered message whose first copy was stored while this one waited for
  -- the head (or earlier in the same statement): skipped here, before it takes a
  -- sequence number, so the chain never counts an entry that is not stored.
  if exists (select 1 from audit.records where id = new.id) then
    return null;
  end if;
  new.seq := head_seq + 1;
  new.prev_hash := head_hash;
  new.hash := audit.entry_hash(new);
  perform set_config('lab_audit.running_head', k || ':' || new.seq || ':' || new.hash, true);
  return new;
end
$$;

-- Stores each chain's head after a statement that extended it.
create function audit.store_chain_heads() returns trigger
language plpgsql as $$
begin
  update audit.chain_heads h set seq = a.seq, hash = a.hash
  from (
    select distinct on (k) k, seq, hash
    from (select coalesce(org_id, '00000000-0000-0000-0000-000000000000'::uuid) as k, seq, hash from added) x
    order by k, seq desc
  ) a
  where h.chain_org = a.k;
  return null;
end
$$;

-- Entries stored before the chain existed are chained once, in the order the log
-- is read in (created_at, id); each head is written when its chain is done.
do $$
declare
  r audit.records%rowtype;
  k uuid;
  cur uuid;
  n bigint := 0;
  prev text := repeat('0', 64);
begin
  for r in select * from audit.records order by coalesce(org_id, '00000000-0000-0000-0000-000000000000'::uuid), created_at, id loop
    k := coalesce(r.org_id, '00000000-0000-0000-0000-000000000000'::uuid);
    if cur is distinct from k then
      if cur is not null then
        insert into audit.chain_heads (chain_org, seq, hash) values (cur, n, prev);
      end if;
      cur := k;
      n := 0;
      prev := repeat('0', 64);
    end if;
    n := n + 1;
    r.seq := n;
    r.prev_hash := prev;
    r.hash := audit.entry_hash(r);
    update audit.records set seq = r.seq, prev_hash = r.prev_hash, hash = r.hash where id = r.id;
    prev := r.hash;
  end loop;
  if cur is not null then
    insert into audit.chain_heads (chain_org, seq, hash) values (cur, n, prev);
  end if;
end
$$;

alter table audit.records alter column seq set not null;
alter table audit.records alter column prev_hash set not null;
alter table audit.records alter column hash set not null;

create trigger records_chain before insert on audit.records
  for each row execute function audit.chain_entry();
create trigger records_chain_heads after insert on audit.records
  referencing new table as added
  for each statement execute function audit.store_chain_heads();

-- The chain's order, walked by verification in pages.
create unique index records_org_seq_idx on audit.records (org_id, seq);
