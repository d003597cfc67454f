-- Artifact retention (src/artifact-retention.ts) finds succeeded jobs whose
-- artifact is past its age without reading every job of every organisation.
create index jobs_artifact_age_idx on jobs.jobs (finished_at) where status = 'succeeded' and result_path is not null;
