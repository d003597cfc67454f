-- Fair claiming (store.ts claimNext): the organisations with waiting jobs are
-- walked through the first index, each offering its earliest due jobs, and the
-- second counts what each already has running.
create index jobs_org_due_idx on jobs.jobs (org_id, run_after) where status in ('queued', 'failed');
create index jobs_org_running_idx on jobs.jobs (org_id) where status = 'running';
