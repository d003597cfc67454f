import { jobs } from '@lab/contracts';
import type { FileStore, GrpcServer, ServiceDeps } from '@lab/kit';
import { createJob, getJob, listJobs, readArtifact } from './api.js';

/** The jobs service's RPCs (role api): create, list, read a job, and stream its artifact from the artifact store. */
export function registerHandlers(server: GrpcServer, deps: ServiceDeps, opts: { maxAttempts: number; files: FileStore }): void {
  server.add(jobs.JobsServiceService, {
    createJob: (req, caller) => createJob(deps, caller, req.body, opts.maxAttempts),
    listJobs: async (req, caller) => listJobs(deps, caller, req.query),
    getJob: (req, caller) => getJob(deps, caller, req.id),
    readArtifact: (req, caller) => readArtifact(deps, caller, req.id, opts.files),
  });
}
