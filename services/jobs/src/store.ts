import { sql, type SQL } from 'drizzle-orm';
import { jobFromRowJson } from '@lab/contracts';
import {
  activeTraceCarrier,
  isGuid,
  newId,
  PLANNED_PER_CALL,
  rows,
  sqlArray,
  tracingOn,
  type CallerContext,
  type Emitter,
  type Executor,
  type Tx,
} from '@lab/kit';
import { isAdministrator } from '@lab/permissions';

const T = sql`jobs.jobs`;

const SPEC_FIELDS = sql`'id', j.id, 'job_type', j.job_type, 'status', j.status, 'progress', j.progress, 'status_text', j.status_text,
  'result_path', j.result_path, 'result_meta', j.result_meta, 'error_message', j.error_message,
  'attempts', j.attempts, 'max_attempts', j.max_attempts, 'enqueued_at', j.enqueued_at,
  'started_at', j.started_at, 'finished_at', j.finished_at`;

/**
 * The Job of the spec, exactly its fields, rendered by PostgreSQL; a job made of
 * an inbound webhook event also names the event and carries its payload as
 * `context`, so what the sender sent is visible beside what became of it.
 */
const JOB_JSON = sql`case when j.inbound_event_id is null then json_build_object(${SPEC_FIELDS})
  else json_build_object(${SPEC_FIELDS}, 'inbound_event_id', j.inbound_event_id, 'context', j.context) end`;

/** What the service keeps beside the Job: who asked, for visibility, events and reads on their behalf. */
export interface JobRow {
  json: string;
  id: string;
  org_id: string;
  job_type: string;
  input: Record<string, unknown>;
  status: string;
  attempts: number;
  max_attempts: number;
  result_path: string | null;
  result_meta: Record<string, unknown> | null;
  created_by: string | null;
  created_by_token_id: string | null;
  creator_role: string | null;
  creator_department_id: string | null;
  /** when the job last changed (UPDATED_AT) */
  updated_at: string;
  /** the trace of the request or event that made the job (claimNext only, with tracing on) */
  traceparent?: string | null;
  tracestate?: string | null;
}

/**
 * When a job last changed, to the microsecond, as fixed-width UTC text (so text
 * order is time order). Updates set it with clock_timestamp(), read while the
 * row is locked, not now(), the transaction's start: an update that found the
 * row as another committed it may have begun before that commit, but reads the
 * clock after it. So of two updates of a job, the later one has the later time.
 */
const UPDATED_AT = sql`to_char(j.updated_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

const ROW = sql`${JOB_JSON}::text as json, j.id, j.org_id, j.job_type, j.input, j.status, j.attempts, j.max_attempts,
  j.result_path, j.result_meta, j.created_by, j.created_by_token_id, j.creator_role, j.creator_department_id, ${UPDATED_AT} as updated_at`;

/**
 * `job.updated` carries the Job, who may see it (creator user or token), and when
 * it changed: the API and the workers publish a job's updates from their own
 * outboxes, so a worker that claims a job at once can publish `running` before the
 * API has published `queued`; the realtime channel orders them by this time.
 */
export function emitUpdated(emit: Emitter, r: JobRow): void {
  emit.event('job.updated', r.org_id, {
    job: JSON.parse(r.json) as Record<string, unknown>,
    created_by: r.created_by,
    created_by_token_id: r.created_by_token_id,
    updated_at: r.updated_at,
  });
}

/** A user sees the jobs they created, a token without a user those it created, administrators all. */
function visibleTo(c: CallerContext): SQL {
  if (isAdministrator(c)) return sql`true`;
  if (c.user_id) return sql`j.created_by = ${c.user_id}::uuid`;
  return c.token_id ? sql`j.created_by_token_id = ${c.token_id}::uuid and j.created_by is null` : sql`false`;
}

/** What a job is made with beside its type and input. */
export interface NewJob {
  maxAttempts: number;
  /** the inbound webhook event the job is for: at most one job per event */
  inboundEventId?: string | null;
  /** that event's payload, as sent */
  context?: unknown;
  /** the job cannot run (its input is not valid): made dead at once with this reason, never claimed */
  deadWith?: string;
}

/**
 * Inserts a queued job (or, given deadWith, a dead one). enqueued_at is the list
 * cursor, so it is made unique per organisation: the later of the clock and the
 * newest job plus a microsecond; the unique index turns a concurrent tie into a
 * retry (see enqueueJob). A job of an inbound webhook event names it, and
 * undefined comes back when that event has its job already.
 */
export async function insertJob(
  tx: Tx,
  caller: CallerContext & { org_id: string },
  job_type: string,
  input: Record<string, unknown>,
  job: NewJob,
): Promise<JobRow | undefined> {
  const id = newId();
  const dead = job.deadWith !== undefined;
  // the trace the job is made in, continued by its runs (worker.ts)
  const trace = activeTraceCarrier();
  const [r] = await rows<JobRow>(
    tx,
    sql`with ins as (
          insert into ${T} (id, org_id, job_type, input, max_attempts, enqueued_at, created_by, created_by_token_id, creator_role,
            creator_department_id, inbound_event_id, context, status, error_message, finished_at${trace ? sql`, traceparent, tracestate` : sql``})
          values (${id}::uuid, ${caller.org_id}::uuid, ${job_type}, ${JSON.stringify(input)}::jsonb, ${job.maxAttempts},
            greatest(clock_timestamp(), (select max(enqueued_at) + interval '1 microsecond' from ${T} where org_id = ${caller.org_id}::uuid)),
            ${caller.user_id}::uuid, ${caller.token_id}::uuid, ${caller.role}, ${caller.department_id}::uuid, ${job.inboundEventId ?? null}::uuid,
            ${job.context === undefined ? null : JSON.stringify(job.context)}::jsonb,
            ${dead ? 'dead' : 'queued'}, ${dead ? job.deadWith!.slice(0, 2000) : null}, ${dead ? sql`now()` : null}${
              trace ? sql`, ${trace.traceparent ?? null}, ${trace.tracestate ?? null}` : sql``
            })
          on conflict (inbound_event_id) where inbound_event_id is not null do nothing
          returning *)
        select ${ROW} from ins j`,
  );
  return r;
}

export async function getVisible(db: Executor, caller: CallerContext, org_id: string, id: string): Promise<JobRow | undefined> {
  const [r] = await rows<JobRow>(db, sql`select ${ROW} from ${T} j where j.org_id = ${org_id}::uuid and j.id = ${id}::uuid and ${visibleTo(caller)}`);
  return r;
}

export interface ListQuery {
  limit: number;
  status?: string;
  job_type?: string;
  cursor?: string;
}

/** Newest first by (enqueued_at, id); the cursor is the enqueued_at of the previous page's last job. */
export async function listVisible(db: Executor, caller: CallerContext, org_id: string, q: ListQuery) {
  const where = [sql`j.org_id = ${org_id}::uuid`, visibleTo(caller)];
  if (q.status) where.push(sql`j.status = ${q.status}`);
  if (q.job_type) where.push(sql`j.job_type = ${q.job_type}`);
  if (q.cursor) where.push(sql`j.enqueued_at < ${q.cursor}::timestamptz`);
  const page = await rows<{ json: string; enqueued_at: string }>(
    db,
    sql`select ${JOB_JSON}::text as json, to_json(j.enqueued_at) #>> '{}' as enqueued_at from ${T} j
        where ${sql.join(where, sql` and `)} order by j.enqueued_at desc, j.id desc limit ${q.limit + 1}`,
  );
  const more = page.length > q.limit;
  const shown = more ? page.slice(0, q.limit) : page;
  return { jobs: shown.map((p) => jobFromRowJson(p.json)), count: shown.length, next_cursor: more ? shown[shown.length - 1]!.enqueued_at : undefined };
}

/**
 * Due jobs each organisation offers to a claim: more than one, so that claimers
 * racing for the same organisation's backlog find one not locked by another.
 */
const OFFERED_PER_ORG = 8;

/**
 * Claims the next job, fairly across organisations: of the due jobs, one of the
 * organisation with the fewest jobs running goes first, and within it the
 * earliest due. An organisation that queues ten thousand exports then shares
 * the workers with the others instead of holding them for hours. The
 * organisations with waiting jobs are walked by a loose index scan, so the cost
 * follows their number, not the depth of any backlog.
 */
export async function claimNext(tx: Tx, workerId: string): Promise<JobRow | undefined> {
  const [r] = await rows<JobRow>(
    tx,
    sql`${PLANNED_PER_CALL}with recursive orgs(org_id) as (
          (select org_id from ${T} where status in ('queued', 'failed') order by org_id limit 1)
          union all
          select (select w.org_id from ${T} w where w.status in ('queued', 'failed') and w.org_id > orgs.org_id order by w.org_id limit 1)
          from orgs where orgs.org_id is not null
        ), offered as (
          select d.id, d.run_after, d.enqueued_at,
            (select count(*) from ${T} r where r.org_id = o.org_id and r.status = 'running') as running
          from orgs o cross join lateral (
            select q.id, q.run_after, q.enqueued_at from ${T} q
            where q.org_id = o.org_id and q.status in ('queued', 'failed') and q.run_after <= now()
            order by q.run_after, q.enqueued_at limit ${OFFERED_PER_ORG}
          ) d
          where o.org_id is not null
        ), next as (
          select j.id from ${T} j join offered c on c.id = j.id
          where j.status in ('queued', 'failed') and j.run_after <= now()
          order by c.running, c.run_after, c.enqueued_at limit 1
          for update of j skip locked),
        upd as (
          update ${T} j set status = 'running', attempts = j.attempts + 1, started_at = coalesce(j.started_at, now()),
            heartbeat_at = now(), worker_id = ${workerId}, progress = 0, status_text = 'started', error_message = null, updated_at = clock_timestamp()
          from next where j.id = next.id returning j.*)
        select ${ROW}${tracingOn() ? sql`, j.traceparent, j.tracestate` : sql``} from upd j`,
  );
  return r;
}

/** Which of these jobs are running now (ids that are not UUIDs are none). */
export async function runningJobs(db: Executor, ids: string[]): Promise<Set<string>> {
  const uuids = ids.filter((id) => isGuid(id));
  if (!uuids.length) return new Set();
  const found = await rows<{ id: string }>(db, sql`select id::text from ${T} where id = any(${sqlArray(uuids)}::uuid[]) and status = 'running'`);
  return new Set(found.map((r) => r.id));
}

/** Changes a job this worker still holds; undefined when it was taken away. */
export async function updateHeld(tx: Tx, id: string, workerId: string, set: SQL): Promise<JobRow | undefined> {
  const [r] = await rows<JobRow>(
    tx,
    sql`with upd as (update ${T} j set ${set}, updated_at = clock_timestamp()
          where j.id = ${id}::uuid and j.worker_id = ${workerId} and j.status = 'running' returning j.*)
        select ${ROW} from upd j`,
  );
  return r;
}

/** Keeps this worker's hold on its jobs; returns the ids it still holds. */
export async function heartbeat(db: Executor, ids: string[], workerId: string): Promise<Set<string>> {
  if (!ids.length) return new Set();
  const held = await rows<{ id: string }>(
    db,
    sql`update ${T} set heartbeat_at = now() where worker_id = ${workerId} and status = 'running'
        and id in (${sql.join(
          ids.map((i) => sql`${i}::uuid`),
          sql`, `,
        )}) returning id`,
  );
  return new Set(held.map((h) => h.id));
}

/**
 * Takes back running jobs whose worker stopped beating: queued again (their
 * attempt counted), or dead when that was the last attempt.
 */
export async function reapStale(tx: Tx, visibilityMs: number): Promise<JobRow[]> {
  return rows<JobRow>(
    tx,
    sql`with stale as (
          select id from ${T} where status = 'running' and heartbeat_at < now() - (${visibilityMs} * interval '1 millisecond')
          for update skip locked),
        upd as (
          update ${T} j set
            status = case when j.attempts >= j.max_attempts then 'dead' else 'queued' end,
            finished_at = case when j.attempts >= j.max_attempts then now() else null end,
            error_message = 'worker stopped responding', status_text = 'worker lost; taken back',
            worker_id = null, run_after = now(), updated_at = clock_timestamp()
          from stale where j.id = stale.id returning j.*)
        select ${ROW} from upd j`,
  );
}
