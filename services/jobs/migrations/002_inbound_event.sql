-- A job requested by an inbound webhook event names that event: one job per
-- event, however often its inbound_webhook.received message is delivered.
alter table jobs.jobs add column inbound_event_id uuid;
create unique index jobs_inbound_event_idx on jobs.jobs (inbound_event_id) where inbound_event_id is not null;
