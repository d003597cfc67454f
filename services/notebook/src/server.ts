import { notebook, recordsWire } from '@lab/contracts';
import { type GrpcServer, type ServiceDeps } from '@lab/kit';
import { PeerReferences, recordServiceHandlers } from '@lab/records';
import { amendExperiment, listSignatures, listVersions } from './amendments.js';
import { experiments } from './experiments.js';
import { projects } from './projects.js';
import { samples } from './samples.js';
import { signExperiment } from './signing.js';

const resources = [experiments, projects, samples];

/** Registers the services; returns what closes their clients of other services. */
export function registerHandlers(server: GrpcServer, deps: ServiceDeps): () => Promise<void> {
  // members and departments that references name are identity's
  const peers = new PeerReferences(deps);
  const remote = { member: peers.member, department: peers.department };
  server.add(recordsWire.service, recordServiceHandlers(deps, resources, { remote, departmentHolds: peers.departmentHolds }));
  server.add(notebook.NotebookServiceService, {
    signExperiment: (req, caller) => signExperiment(deps, caller, req),
    amendExperiment: (req, caller) => amendExperiment(deps, caller, req.id, req.body, remote, peers.departmentHolds),
    listExperimentVersions: async (req, caller) => listVersions(deps.db.orm, caller, req.id),
    listExperimentSignatures: async (req, caller) => listSignatures(deps.db.orm, caller, req.id),
  });
  return async () => peers.close();
}
