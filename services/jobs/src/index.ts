import path from 'node:path';
import { envInt, loadConfig, openFileStore, type FileStore, type FileStoreKind, type ServiceDefinition } from '@lab/kit';
import { z } from 'zod';
import { purgeExpiredArtifacts } from './artifact-retention.js';
import { sweepScratch } from './scratch.js';
import { registerHandlers } from './server.js';
import { runningJobs } from './store.js';
import { consumeInboundEvents } from './inbound.js';
import { Sources, type PeerAddresses } from './sources.js';
import { JobWorker, type WorkerOptions } from './worker.js';

export type JobsRole = 'api' | 'worker' | 'both';

export interface JobsOptions extends Partial<WorkerOptions> {
  /** api serves the RPCs, worker runs jobs; default JOBS_ROLE, else both */
  role?: JobsRole;
  maxAttempts?: number;
  /** addresses of the services jobs read; default the address book (deps.peers: <NAME>_ADDR in the cluster) */
  peers?: PeerAddresses;
  /** records per page read from the record and audit services */
  pageSize?: number;
  /** days a succeeded job's artifact is kept; 0 keeps it */
  artifactRetentionDays?: number;
  /** where artifacts are kept; default JOBS_ARTIFACT_STORE, else the service's schema on a PostgreSQL server and the directory embedded */
  artifactStore?: FileStoreKind;
}

/**
 * Settings, through the kit's schema: a wrong value is an error naming the
 * variable at start, not a silent fallback. The default record bound of an
 * export is generous (a million-row audit log and the rest of a large
 * organisation); a page is at most the record services' largest (500).
 */
const jobsEnv = z.object({
  JOBS_ROLE: z.enum(['api', 'worker', 'both']).default('both'),
  JOBS_MAX_ATTEMPTS: envInt(3, 1, 100),
  JOBS_CONCURRENCY: envInt(2, 1, 256),
  JOBS_POLL_MS: envInt(1_000, 10, 3_600_000),
  JOBS_HEARTBEAT_MS: envInt(5_000, 10, 3_600_000),
  JOBS_VISIBILITY_MS: envInt(30_000, 100, 86_400_000),
  JOBS_RETRY_BASE_MS: envInt(2_000, 0, 3_600_000),
  JOBS_STEP_DELAY_MS: envInt(0, 0, 600_000),
  JOBS_EXPORT_MAX_RECORDS: envInt(5_000_000, 1),
  JOBS_REPORT_MAX_BYTES: envInt(128 * 1024 * 1024, 1024),
  JOBS_EXPORT_PAGE_SIZE: envInt(500, 1, 500),
  JOBS_ARTIFACT_RETENTION_DAYS: envInt(0, 0, 36_500),
  // empty: the service's data directory (resolved in register)
  JOBS_ARTIFACT_DIR: z.string().default(''),
  JOBS_ARTIFACT_STORE: z.enum(['postgres', 'filesystem']).optional(),
});

/** Options from the environment, overridden by what the caller gives. */
export function jobsConfig(opts: JobsOptions = {}): Required<Omit<JobsOptions, 'peers' | 'artifactStore'>> & {
  peers: PeerAddresses;
  artifactStore: FileStoreKind | undefined;
} {
  const env = loadConfig(jobsEnv);
  return {
    role: opts.role ?? env.JOBS_ROLE,
    maxAttempts: opts.maxAttempts ?? env.JOBS_MAX_ATTEMPTS,
    concurrency: opts.concurrency ?? env.JOBS_CONCURRENCY,
    pollMs: opts.pollMs ?? env.JOBS_POLL_MS,
    heartbeatMs: opts.heartbeatMs ?? env.JOBS_HEARTBEAT_MS,
    visibilityMs: opts.visibilityMs ?? env.JOBS_VISIBILITY_MS,
    retryBaseMs: opts.retryBaseMs ?? env.JOBS_RETRY_BASE_MS,
    stepDelayMs: opts.stepDelayMs ?? env.JOBS_STEP_DELAY_MS,
    artifactDir: opts.artifactDir ?? env.JOBS_ARTIFACT_DIR,
    exportMaxRecords: opts.exportMaxRecords ?? env.JOBS_EXPORT_MAX_RECORDS,
    reportMaxBytes: opts.reportMaxBytes ?? env.JOBS_REPORT_MAX_BYTES,
    pageSize: opts.pageSize ?? env.JOBS_EXPORT_PAGE_SIZE,
    artifactRetentionDays: opts.artifactRetentionDays ?? env.JOBS_ARTIFACT_RETENTION_DAYS,
    artifactStore: opts.artifactStore ?? env.JOBS_ARTIFACT_STORE,
    peers: opts.peers ?? {},
  };
}

/**
 * Allowlisted background jobs: the API (role api), the worker (role worker), or
 * both. The worker role also turns inbound webhook events into jobs.
 */
export function jobsDefinition(opts: JobsOptions = {}): ServiceDefinition {
  // read at start, kept for the retention rules
  let cfg: ReturnType<typeof jobsConfig> | undefined;
  let files: FileStore | undefined;
  return {
    name: 'jobs',
    schema: 'jobs',
    migrationsDir: path.join(__dirname, '..', 'migrations'),
    async register(server, deps) {
      const c = (cfg = jobsConfig(opts));
      c.artifactDir ||= path.join(deps.dataDir, 'artifacts');
      const store = (files = openFileStore(deps.db, 'jobs', { kind: c.artifactStore, dir: c.artifactDir }));
      registerHandlers(server, deps, { maxAttempts: c.maxAttempts, files: store });
      if (c.role === 'api') return;
      // a worker's task: API replicas only serve calls, and the durable queue keeps the events while no worker runs
      await consumeInboundEvents(deps, c.maxAttempts);
      const sources = new Sources(deps.secret, c.peers, deps.peers, c.pageSize);
      const worker = new JobWorker(deps, sources, c, store);
      await worker.start();
      return async () => {
        await worker.stop();
        sources.close();
      };
    },
    // workers own the artifacts and their scratch files
    retention: (deps) =>
      cfg!.role === 'api'
        ? []
        : [
            ['expired job artifacts', () => purgeExpiredArtifacts(deps.db, files!, cfg!.artifactRetentionDays)],
            ['artifacts of runs that died while writing them', () => files!.sweep()],
            ['scratch files of dead runs', () => sweepScratch(cfg!.artifactDir, (ids) => runningJobs(deps.db.orm, ids))],
          ],
  };
}

export const definition = jobsDefinition();
export { layout } from './reports.js';
