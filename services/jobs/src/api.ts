import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { basename } from 'node:path';
import { z } from 'zod';
import {
  DomainError,
  fieldIssues,
  isGuid,
  parseJsonObject,
  parseWith,
  validationFailed,
  type CallerContext,
  type ServiceDeps,
} from '@lab/kit';
import { artifactFile } from './artifacts.js';
import { ADMIN_JOB_TYPES, INPUTS, isJobType, isoTime, JOB_TYPES } from './job-types.js';
import { emitUpdated, getVisible, insertJob, isJobAdmin, listVisible, type JobRow } from './store.js';

const createBody = z.strictObject({
  job_type: z.string().min(1).max(64),
  input: z.record(z.string(), z.unknown()).optional(),
});

function orgOf(caller: CallerContext): string {
  if (!caller.org_id) throw DomainError.forbidden('an organisation is required', 'org_required');
  return caller.org_id;
}

const isUniqueViolation = (err: unknown) => {
  const e = err as { code?: string; cause?: { code?: string } };
  return e?.code === '23505' || e?.cause?.code === '23505';
};

/**
 * POST /v1/jobs. Order of refusals: a malformed body 400; a job type outside the
 * allowlist 403; an administrators' job type for anyone else 403; then the
 * type's input 400. The job is queued with job.requested (wakes a worker) and
 * job.updated in the same transaction.
 */
export async function createJob(deps: ServiceDeps, caller: CallerContext, json: string, maxAttempts: number): Promise<string> {
  const org_id = orgOf(caller);
  const body = parseWith(createBody, parseJsonObject(json));
  if (!isJobType(body.job_type)) {
    throw DomainError.forbidden(`job_type ${body.job_type} is not allowed; allowed: ${JOB_TYPES.join(', ')}`, 'job_type_not_allowed');
  }
  if (ADMIN_JOB_TYPES.has(body.job_type) && !isJobAdmin(caller)) {
    throw DomainError.forbidden(`job_type ${body.job_type} needs an administrator`, 'admin_required');
  }
  const parsed = INPUTS[body.job_type].safeParse(body.input ?? {});
  if (!parsed.success) {
    throw validationFailed(fieldIssues(parsed.error).map((i) => ({ ...i, path: i.path ? `input.${i.path}` : 'input' })));
  }
  const input = parsed.data as Record<string, unknown>;
  for (let attempt = 0; ; attempt++) {
    try {
      const row = await deps.outbox.write(caller, async (tx, emit) => {
        const r = await insertJob(tx, { ...caller, org_id }, body.job_type, input, maxAttempts);
        emit.event('job.requested', org_id, { job_id: r.id, job_type: r.job_type });
        emitUpdated(emit, r);
        emit.audit(org_id, { action: 'create', resource: 'jobs', record_id: r.id, after: { job_type: r.job_type, input } });
        return r;
      });
      return row.json;
    } catch (err) {
      // two jobs of one organisation stamped with the same microsecond: stamp again
      if (!isUniqueViolation(err) || attempt >= 4) throw err;
    }
  }
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

export async function getJob(deps: ServiceDeps, caller: CallerContext, id: string): Promise<string> {
  return (await visible(deps, caller, id)).json;
}

const CHUNK = 64 * 1024;

/** The artifact of a succeeded job in 64 KiB chunks; the first carries type, size and name. */
export async function* readArtifact(deps: ServiceDeps, caller: CallerContext, id: string, dir: string) {
  const job = await visible(deps, caller, id);
  if (job.status !== 'succeeded' || !job.result_path) throw DomainError.notFound('the job has no artifact (yet)', 'artifact_not_found');
  const file = artifactFile(dir, job.result_path);
  const size = await stat(file).then(
    (s) => s.size,
    () => {
      throw DomainError.notFound('the artifact is no longer stored', 'artifact_not_found');
    },
  );
  const content_type = String(job.result_meta?.content_type ?? 'application/octet-stream');
  let first = true;
  for await (const data of createReadStream(file, { highWaterMark: CHUNK })) {
    yield first ? { data: data as Buffer, content_type, size, filename: `${job.job_type}-${basename(job.result_path)}` } : { data: data as Buffer };
    first = false;
  }
  if (first) yield { data: Buffer.alloc(0), content_type, size, filename: `${job.job_type}-${basename(job.result_path)}` };
}
