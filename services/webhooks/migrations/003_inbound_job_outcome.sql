-- What became of an inbound event's job request, as the jobs service reports
-- it: 'created' with the job's id, or 'rejected' with the reason (a job type
-- outside the allowlist, or a payload that is not valid input for the type).
alter table webhooks.inbound_events add column job_id uuid, add column job_reason text;
alter table webhooks.inbound_events
  add constraint inbound_events_job_status_check check (job_status in ('pending', 'created', 'rejected'));
