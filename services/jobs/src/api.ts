import { basename } from 'node:path';
import { z } from 'zod';
import { jobFromRowJson, type jobs } from '@lab/contracts';
import {
  DomainError,
  fieldIssues,
  isGuid,
  parseWith,
  structBody,
  validationFailed,
  type CallerContext,
  type Emitter,
  type FileStore,
  type ServiceDeps,
} from '@lab/kit';
import { assertMay } from '@lab/permissions';
import { ADMIN_JOB_TYPES, INPUTS, inputForAudit, isJobType, isoTime, JOB_TYPES, WRITING_JOB_TYPES, type JobType } from './job-types.js';
import { emitUpdated, getVisible, insertJob, listVisible, type JobRow } from './store.js';

const createBody = z.strictObject({
  // any string: one outside the allowlist (empty or too long included) is the
  // spec's 403, decided by checkJobRequest; the body's size limit bounds it
  job_type: z.string(),
  input: z.record(z.string(), z.unknown()).optional(),
});

function orgOf(caller: CallerContext): string {
  if (!caller.org_id) throw DomainError.forbidden('an organisation is required', 'org_required');
  return caller.org_id;
}

const isUniqueViolation = (err: unknown) => {
  const e = err as { code?: string; cause?: { code?: string } } | null | undefined;
  return e?.code === '23505' || e?.cause?.code === '23505';
};

/** A job request that passed the checks of POST /v1/jobs. */
export interface CheckedJob {
  job_type: JobType;
  input: Record<string, unknown>;
}

/**
 * The checks of every job request, in the order of POST /v1/jobs: a job type
 * outside the allowlist 403; an administrators' job type for anyone else 403;
 * then the type's input 400 (a missing input is {}).
 */
export function checkJobRequest(caller: CallerContext, job_type: string, input: unknown): CheckedJob {
  if (!isJobType(job_type)) {
    const shown = JSON.stringify(job_type.length > 64 ? `${job_type.slice(0, 64)}...` : job_type);
    throw DomainError.forbidden(`job_type ${shown} is not allowed; allowed: ${JOB_TYPES.join(', ')}`, 'job_type_not_allowed');
  }
  if (ADMIN_JOB_TYPES.has(job_type)) assertMay(caller, 'administer', `job_type ${job_type}`);
  // an import creates records as its creator: one who may not write is told now, not by a dead job
  if (WRITING_JOB_TYPES.has(job_type)) assertMay(caller, 'write', `records (a ${job_type} job creates them)`);
  const parsed = INPUTS[job_type].safeParse(input ?? {}, { reportInput: true });
  if (!parsed.success) {
    throw validationFailed(fieldIssues(parsed.error).map((i) => ({ ...i, path: i.path ? `input.${i.path}` : 'input' })));
  }
  return { job_type, input: parsed.data };
}

export interface EnqueueOptions {
  /** the inbound webhook event the job is for: at most one job per event */
  inboundEventId?: string;
  /** that event's payload, kept with the job as its context */
  context?: unknown;
  /** the job cannot run: it is made dead at once with this reason (and no worker is woken) */
  deadWith?: string;
  /** further messages of the same transaction, given the new job */
  also?: (emit: Emitter, job: JobRow) => void;
  /**
   * The call's answer, given the new job: kept with a keyed call's receipt in the
   * same transaction (Outbox.write), so it survives a process killed right after
   * the commit.
   */
  answer?: (job: JobRow) => unknown;
}

/**
 * Queues a checked job with job.requested (wakes a worker), job.updated and its
 * audit record in one transaction (a job made dead at once has no job.requested). Undefined when the inbound event named in
 * `opts` has its job already.
 */
export async function enqueueJob(
  deps: ServiceDeps,
  caller: CallerContext & { org_id: string },
  job: CheckedJob,
  maxAttempts: number,
  opts: EnqueueOptions = {},
): Promise<JobRow | undefined> {
  const { org_id } = caller;
  for (let attempt = 0; ; attempt++) {
    try {
      return await deps.outbox.write(
        caller,
        async (tx, emit) => {
          const r = await insertJob(tx, caller, job.job_type, job.input, {
            maxAttempts,
            inboundEventId: opts.inboundEventId,
            context: opts.context,
            deadWith: opts.deadWith,
          });
          if (!r) return undefined;
          if (opts.deadWith === undefined) emit.event('job.requested', org_id, { job_id: r.id, job_type: r.job_type });
          emitUpdated(emit, r);
          emit.audit(org_id, {
            action: 'create',
            resource: 'jobs',
            record_id: r.id,
            after: { job_type: r.job_type, input: inputForAudit(job.job_type, job.input) },
          });
          opts.also?.(emit, r);
          return r;
        },
        opts.answer && ((r) => (r ? opts.answer!(r) : undefined)),
      );
    } catch (err) {
      // two jobs of one organisation stamped with the same microsecond: stamp again
      if (!isUniqueViolation(err) || attempt >= 4) throw err;
    }
  }
}

/** What the CreateJob handler answers: the job as stored. */
const jobAnswer = (job: JobRow): jobs.JobResponse => ({ job: jobFromRowJson(job.json) });

/** POST /v1/jobs: a malformed body 400, then the checks of checkJobRequest. */
export async function createJob(
  deps: ServiceDeps,
  caller: CallerContext,
  given: Record<string, unknown> | undefined,
  maxAttempts: number,
): Promise<jobs.JobResponse> {
  const org_id = orgOf(caller);
  const body = parseWith(createBody, structBody(given));
  const job = checkJobRequest(caller, body.job_type, body.input);
  const row = await enqueueJob(deps, { ...caller, org_id }, job, maxAttempts, { answer: jobAnswer });
  return jobAnswer(row!);
}

const STATUSES = ['queued', 'running', 'succeeded', 'failed', 'dead'] as const;

const listQuery = z.strictObject({
  limit: z.coerce.number().int().min(1).max(200).default(50),
  status: z.enum(STATUSES).optional(),
  job_type: z.string().min(1).max(64).optional(),
  // a '+' of the offset arrives as a space when the client did not encode it
  cursor: z
    .string()
    .transform((s) => s.replace(/ /g, '+'))
    .pipe(isoTime)
    .optional(),
});

export async function listJobs(deps: ServiceDeps, caller: CallerContext, query: Record<string, string>) {
  const q = parseWith(listQuery, query);
  return listVisible(deps.db.orm, caller, orgOf(caller), q);
}

async function visible(deps: ServiceDeps, caller: CallerContext, id: string): Promise<JobRow> {
  const org_id = orgOf(caller);
  const r = isGuid(id) ? await getVisible(deps.db.orm, caller, org_id, id.toLowerCase()) : undefined;
  if (!r) throw DomainError.notFound('job not found');
  return r;
}

export async function getJob(deps: ServiceDeps, caller: CallerContext, id: string): Promise<jobs.JobResponse> {
  return jobAnswer(await visible(deps, caller, id));
}

const CHUNK = 64 * 1024;

/** The artifact of a succeeded job in 64 KiB chunks; the first carries type, size and name. */
export async function* readArtifact(deps: ServiceDeps, caller: CallerContext, id: string, files: FileStore) {
  const job = await visible(deps, caller, id);
  if (job.result_meta?.artifact_deleted_at) {
    throw DomainError.notFound(
      `the artifact was removed at ${job.result_meta.artifact_deleted_at as string} (retention); run the job again`,
      'artifact_not_found',
    );
  }
  if (job.status !== 'succeeded' || !job.result_path) throw DomainError.notFound('the job has no artifact (yet)', 'artifact_not_found');
  const opened = await files.open(job.result_path);
  if (!opened) throw DomainError.notFound('the artifact is no longer stored', 'artifact_not_found');
  let first = true;
  const { size } = opened;
  const content_type = (job.result_meta?.content_type as string | undefined) ?? 'application/octet-stream';
  try {
    // the store's chunks (up to its chunk size) cut into messages of CHUNK bytes
    for await (const chunk of opened.stream as AsyncIterable<Buffer>) {
      for (let at = 0; at < chunk.length; at += CHUNK) {
        const data = chunk.subarray(at, at + CHUNK);
        yield first ? { data, content_type, size, filename: `${job.job_type}-${basename(job.result_path)}` } : { data };
        first = false;
      }
    }
  } finally {
    // a cancelled call (the client gone) lets go of the file and fetches no further chunk
    opened.stream.destroy();
  }
  if (first) yield { data: Buffer.alloc(0), content_type, size, filename: `${job.job_type}-${basename(job.result_path)}` };
}
