-- Fair claiming (store.ts claimNext): the organisations with waiting jobs are
-- walked through the first index, each offering its earliest due jobs in queue
-- order, and the second counts what each already has running. The first-in,
-- first-out index it replaces serves no query any more.
create index jobs_org_due_idx on jobs.jobs (org_id, run_after, enqueued_at) where status in ('queued', 'failed');
create index jobs_org_running_idx on jobs.jobs (org_id) where status = 'running';
drop index jobs.jobs_due_idx;
