-- The delivery worker claims per receiver host: it walks the distinct hosts with
-- pending deliveries (a loose index scan) and takes each host's earliest due rows.
-- With (host, next_attempt_at) both steps are index probes, so a claim costs in
-- proportion to the hosts, not to the backlog; the window function over every
-- due row it replaces sorted the whole backlog on every claim (32 ms at 12,000
-- pending rows), which slowed delivery exactly when a backlog had built up.
create index deliveries_host_due_idx on webhooks.deliveries (host, next_attempt_at) where status = 'pending';
-- No query orders all pending rows by time any more.
drop index webhooks.deliveries_due_idx;
