// Written by hand: how a lab.jobs.v1.Job maps to and from the JSON the public
// API has always answered (the Job of the spec, as PostgreSQL rendered it).
import { JobStatus, type Job } from './lab/jobs/v1/jobs.js';
import { messageFromRow, messageJson, messageShape, type RecordObject } from './record-json.js';

const SHAPE = messageShape(['enqueued_at', 'started_at', 'finished_at']);

const STATUS_TEXT: { [S in JobStatus]?: string } = {
  [JobStatus.JOB_STATUS_QUEUED]: 'queued',
  [JobStatus.JOB_STATUS_RUNNING]: 'running',
  [JobStatus.JOB_STATUS_SUCCEEDED]: 'succeeded',
  [JobStatus.JOB_STATUS_FAILED]: 'failed',
  [JobStatus.JOB_STATUS_DEAD]: 'dead',
};
// eslint-disable-next-line @typescript-eslint/no-unsafe-enum-assignment -- the keys are STATUS_TEXT's own JobStatus values, stringified by Object.entries
const STATUS_OF = new Map(Object.entries(STATUS_TEXT).map(([k, v]) => [v, Number(k) as JobStatus]));

/** A job's status as the API writes it. */
export function jobStatusText(status: JobStatus): string {
  const text = STATUS_TEXT[status];
  if (!text) throw new Error(`no such job status: ${status}`);
  return text;
}

/**
 * The Job of a row PostgreSQL rendered as JSON (the jobs service's JOB_JSON): an
 * inbound job's context is kept even when null, the only field where null and
 * absent differ (absent: not made of an inbound event).
 */
export function jobFromRowJson(json: string): Job {
  const row = JSON.parse(json) as RecordObject;
  const status = STATUS_OF.get(String(row.status));
  if (status === undefined) throw new Error(`no such job status: ${String(row.status)}`);
  const fields = messageFromRow(SHAPE, row);
  if ('context' in row) fields.context = row.context;
  return { ...fields, status } as unknown as Job;
}

/** A Job as the JSON text clients have always been answered, fields in the spec's order. */
export function jobJson(job: Job): string {
  const fields: RecordObject = {
    id: job.id,
    job_type: job.job_type,
    status: jobStatusText(job.status),
    progress: job.progress,
    status_text: job.status_text,
    result_path: job.result_path,
    result_meta: job.result_meta,
    error_message: job.error_message,
    attempts: job.attempts,
    max_attempts: job.max_attempts,
    enqueued_at: job.enqueued_at,
    started_at: job.started_at,
    finished_at: job.finished_at,
  };
  if (job.inbound_event_id !== undefined) {
    fields.inbound_event_id = job.inbound_event_id;
    fields.context = job.context;
  }
  return messageJson(SHAPE, fields);
}
