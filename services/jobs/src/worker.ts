import { EVENT_ROUTES } from '@lab/contracts';
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { sql } from 'drizzle-orm';
import { CoalescedRunner, DomainError, inSpan, OutageLog, SpanKind, tracingOn, type ErrorKind, type FileStore, type ServiceDeps } from '@lab/kit';
import type { Artifact } from './artifacts.js';
import { elnExport } from './eln/eln-export.js';
import { elnImport } from './eln/eln-import.js';
import { EXPORT_PRODUCERS } from './exports.js';
import { INPUTS, isJobType, WRITING_JOB_TYPES } from './job-types.js';
import { PDF_PRODUCERS, type JobRun } from './reports.js';
import { Sources, type ReadBudget } from './sources.js';
import { claimNext, emitUpdated, heartbeat, reapStale, updateHeld, type JobRow } from './store.js';

export interface WorkerOptions {
  /** jobs one worker runs at once (the prefetch limit) */
  concurrency: number;
  /** fallback poll for due jobs; a job.requested event wakes the worker at once */
  pollMs: number;
  heartbeatMs: number;
  /** a running job whose heartbeat is older than this is taken back */
  visibilityMs: number;
  /** first retry delay; doubled per attempt, at most 5 minutes */
  retryBaseMs: number;
  /** the filesystem artifact store's directory, and where runs stage their scratch files */
  artifactDir: string;
  /** pause before each progress step (demonstrations and tests watch a job run) */
  stepDelayMs: number;
  /** an export with more records than this fails (a bound on the disk and time one job may take) */
  exportMaxRecords: number;
  /** a report whose records hold more JSON than this fails (a bound on the worker's memory) */
  reportMaxBytes: number;
}

/** Why a run stopped early: this worker is stopping, or the job was taken away from it. */
class Interrupted extends Error {
  constructor(readonly reason: 'stop' | 'lost') {
    super(`job interrupted: ${reason}`);
  }
}

const PRODUCERS = { ...PDF_PRODUCERS, ...EXPORT_PRODUCERS, eln_export: elnExport, eln_import: elnImport };

/** Failures a retry cannot change. */
const PERMANENT = new Set<ErrorKind>(['invalid', 'too_large']);

/**
 * The job worker. Jobs live in PostgreSQL; a worker claims due rows with FOR
 * UPDATE SKIP LOCKED (woken by job.requested, or by its poll), runs up to
 * `concurrency` at once, beats a heartbeat for each, and takes back jobs of
 * workers that stopped beating. Every status change is a job.updated event
 * written through the outbox in the same transaction.
 *
 * Transitions: queued -> running -> succeeded; running -> failed (retried after
 * a backoff while attempts < max_attempts) -> running ...; the last failed
 * attempt -> dead. A graceful stop puts its running jobs back to queued without
 * counting the attempt; a crashed worker's job is queued again (attempt counted)
 * once its heartbeat is older than the visibility timeout.
 */
export class JobWorker {
  readonly id = `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
  private readonly running = new Map<string, { abort: AbortController; done: Promise<void> }>();
  private timers: NodeJS.Timeout[] = [];
  private stopped = false;
  private readonly claimer: CoalescedRunner;

  constructor(
    private readonly deps: ServiceDeps,
    private readonly sources: Sources,
    private readonly opts: WorkerOptions,
    /** where artifacts go */
    private readonly files: FileStore,
  ) {
    // each loop runs every few seconds: the database away would be a line each time
    this.outages = new OutageLog(deps.log);
    this.claimer = new CoalescedRunner(
      () => this.claimWhileRoom(),
      (err) => this.outages.failure('job claims', err),
      () => this.outages.success('job claims'),
    );
  }
  private readonly outages: OutageLog;

  async start(): Promise<void> {
    await this.deps.bus.subscribe({
      ...EVENT_ROUTES.jobRequests,
      prefetch: this.opts.concurrency,
      handler: async () => this.kick(),
    });
    const every = (ms: number, what: string, fn: () => Promise<unknown>) => {
      const t = setInterval(
        () =>
          void fn().then(
            () => this.outages.success(what),
            (err: unknown) => this.outages.failure(what, err),
          ),
        ms,
      );
      t.unref();
      this.timers.push(t);
    };
    every(this.opts.pollMs, 'job poll', async () => this.kick());
    every(this.opts.heartbeatMs, 'job heartbeat', () => this.beat());
    every(Math.max(1_000, Math.round(this.opts.visibilityMs / 3)), 'job reaper', () => this.reap());
    this.kick();
  }

  /** Claims due jobs while there is room; concurrent kicks coalesce. */
  kick(): void {
    this.claimer.kick();
  }

  private async claimWhileRoom(): Promise<boolean> {
    while (!this.stopped && this.running.size < this.opts.concurrency) {
      const job = await this.deps.outbox.write(null, async (tx, emit) => {
        const j = await claimNext(tx, this.id);
        if (j) emitUpdated(emit, j);
        return j;
      });
      if (!job) break;
      this.launch(job);
    }
    return false;
  }

  private launch(job: JobRow): void {
    const abort = new AbortController();
    const done = (tracingOn() ? this.traced(job, abort.signal) : this.run(job, abort.signal)).finally(() => {
      this.running.delete(job.id);
      this.kick();
    });
    this.running.set(job.id, { abort, done });
  }

  /**
   * A run as a span of the trace the job was made in (the request or event that
   * asked for it), however long after: its reads, writes and events are below it.
   */
  private traced(job: JobRow, signal: AbortSignal): Promise<void> {
    return inSpan(
      `run ${job.job_type}`,
      SpanKind.INTERNAL,
      job.traceparent ? { traceparent: job.traceparent, tracestate: job.tracestate ?? undefined } : undefined,
      { 'lab.job.id': job.id, 'lab.job.type': job.job_type, 'lab.job.attempt': job.attempts },
      () => this.run(job, signal),
    );
  }

  /** Changes the held job and emits job.updated; a job no longer held interrupts the run. */
  private async change(job: JobRow, set: ReturnType<typeof sql>): Promise<JobRow> {
    const r = await this.deps.outbox.write(null, async (tx, emit) => {
      const u = await updateHeld(tx, job.id, this.id, set);
      if (u) emitUpdated(emit, u);
      return u;
    });
    if (!r) throw new Interrupted('lost');
    return r;
  }

  private async run(job: JobRow, signal: AbortSignal): Promise<void> {
    const log = this.deps.log.child({ job_id: job.id, job_type: job.job_type, attempt: job.attempts });
    const check = () => {
      if (signal.aborted) throw new Interrupted(signal.reason === 'lost' ? 'lost' : 'stop');
    };
    const writes = isJobType(job.job_type) && WRITING_JOB_TYPES.has(job.job_type);
    const caller = Sources.callerOf(job, writes ? ['read', 'write'] : ['read']);
    const budget: ReadBudget = { limit: this.opts.reportMaxBytes, used: 0 };
    const run: JobRun = {
      jobId: job.id,
      sources: this.sources,
      caller,
      files: this.files,
      dir: this.opts.artifactDir,
      base: `${job.org_id}/${job.id}`,
      checkpoint: check,
      maxExportRecords: this.opts.exportMaxRecords,
      all: (resource, query, parent_id) => this.sources.all(caller, budget, resource, query, parent_id),
      step: async (progress, text) => {
        check();
        if (this.opts.stepDelayMs) await new Promise((r) => setTimeout(r, this.opts.stepDelayMs));
        check();
        await this.change(job, sql`progress = ${progress}, status_text = ${text}`);
      },
    };
    try {
      const artifact = await this.produce(job, run);
      check();
      await this.change(
        job,
        sql`status = 'succeeded', progress = 100, status_text = 'done', result_path = ${artifact.path},
            result_meta = ${JSON.stringify(artifact.meta)}::jsonb, finished_at = now(), worker_id = null, heartbeat_at = null`,
      );
      log.info({ result: artifact.meta }, 'job succeeded');
    } catch (err) {
      if (err instanceof Interrupted) return this.interrupted(job, err, log);
      const message = err instanceof DomainError ? `${err.code}: ${err.message}` : 'internal error';
      if (!(err instanceof DomainError)) log.error({ err }, 'job failed');
      const delayMs = Math.min(300_000, this.opts.retryBaseMs * 2 ** Math.max(0, job.attempts - 1));
      // An input the job cannot take, or more data than it may hold, fails the
      // same way on every attempt: a retry would only read it all again.
      // A run that writes may have written part of its records: a retry would write them twice.
      const permanent = (err instanceof DomainError && PERMANENT.has(err.kind)) || writes;
      const last = permanent ? sql`true` : sql`attempts >= max_attempts`;
      await this.change(
        job,
        sql`status = case when ${last} then 'dead' else 'failed' end,
            finished_at = case when ${last} then now() else null end,
            error_message = ${message.slice(0, 2000)},
            status_text = ${permanent ? sql`'gave up: a retry would fail the same way'` : sql`case when attempts >= max_attempts then 'gave up after ' || attempts || ' attempts' else 'will retry' end`},
            run_after = now() + (${delayMs} * interval '1 millisecond'), worker_id = null, heartbeat_at = null`,
      ).catch((e: unknown) => log.warn({ err: e }, 'could not record the failure; the visibility timeout will take the job back'));
      log.warn({ err: message }, 'job attempt failed');
    }
  }

  private async interrupted(job: JobRow, err: Interrupted, log: ServiceDeps['log']): Promise<void> {
    if (err.reason === 'lost') {
      log.warn('job was taken back from this worker; abandoning it');
      return;
    }
    // A graceful stop is not the job's fault: back to the queue, attempt not counted.
    await this.change(
      job,
      sql`status = 'queued', attempts = greatest(attempts - 1, 0), status_text = 'requeued: worker stopped',
          worker_id = null, heartbeat_at = null, run_after = now()`,
    ).catch(() => log.warn('could not requeue on stop; the visibility timeout will take the job back'));
  }

  private async produce(job: JobRow, run: JobRun): Promise<Artifact> {
    if (!isJobType(job.job_type)) throw DomainError.invalid(`job type ${job.job_type} is not supported`);
    // checked when the job was created; a stored input that no longer fits is permanent
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- a stored row is read as it is, not as the type claims
    const parsed = INPUTS[job.job_type].safeParse(job.input ?? {});
    if (!parsed.success)
      throw DomainError.invalid(
        `the job's input does not fit ${job.job_type}: ${parsed.error.issues.map((i) => `${i.path.join('.') || 'input'}: ${i.message}`).join('; ')}`,
      );
    const input = parsed.data;
    const producer = PRODUCERS[job.job_type]!;
    return producer(run, input as never);
  }

  private async beat(): Promise<void> {
    const ids = [...this.running.keys()];
    const held = await heartbeat(this.deps.db.orm, ids, this.id);
    for (const id of ids) if (!held.has(id)) this.running.get(id)?.abort.abort('lost');
  }

  private async reap(): Promise<void> {
    const taken = await this.deps.outbox.write(null, async (tx, emit) => {
      const rows = await reapStale(tx, this.opts.visibilityMs);
      for (const r of rows) emitUpdated(emit, r);
      return rows;
    });
    if (taken.length) {
      this.deps.log.warn({ jobs: taken.map((t) => t.id) }, 'took back jobs of a worker that stopped responding');
      this.kick();
    }
  }

  /** Stops claiming, interrupts running jobs (they go back to the queue) and waits for them. */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const t of this.timers) clearInterval(t);
    await this.claimer.stop();
    for (const r of this.running.values()) r.abort.abort('stop');
    await Promise.all([...this.running.values()].map((r) => r.done));
  }
}
