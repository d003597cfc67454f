-- The payload of the inbound webhook event a job was made of: its context, kept
-- as the sender wrote it (the job's input takes the fields its type defines).
alter table jobs.jobs add column context jsonb;
