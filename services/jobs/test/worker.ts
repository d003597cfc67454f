import { createLogger, runService, type RunningService } from '@lab/kit';
import type { Stack } from '@lab/testing';
import { jobsDefinition, type JobsOptions } from '../src/index';

/**
 * A jobs worker instance of its own over a test stack (whose jobs instance serves
 * the API only), with short polls and heartbeats so tests run quickly; tests stop
 * one mid-job and start another.
 */
export function startJobsWorker(stack: Stack, opts: JobsOptions & { artifactDir: string }): Promise<RunningService> {
  return runService(jobsDefinition({ role: 'worker', pollMs: 100, heartbeatMs: 100, retryBaseMs: 50, ...opts }), {
    log: createLogger('jobs-worker', process.env.TEST_LOG_LEVEL ?? 'silent'),
    bus: stack.bus,
    secret: stack.secret,
    databaseUrl: stack.databaseUrl,
    dataDir: stack.dataDir,
    grpcAddress: '127.0.0.1:0',
    poolSize: 3,
    peers: (peer) => stack.services[peer],
  });
}
