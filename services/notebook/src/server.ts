import { notebook, records } from '@lab/contracts';
import { jsonAnswer, recordServiceHandlers, type GrpcServer, type ServiceDeps } from '@lab/kit';
import { amendExperiment, listSignatures, listVersions } from './amendments.js';
import { experiments } from './experiments.js';
import { projects } from './projects.js';
import { samples } from './samples.js';
import { signExperiment } from './signing.js';

export const resources = [experiments, projects, samples];

export function registerHandlers(server: GrpcServer, deps: ServiceDeps): void {
  server.add(records.RecordServiceService, recordServiceHandlers(deps, resources));
  server.add(notebook.NotebookServiceService, {
    signExperiment: async (req, caller) => jsonAnswer(await signExperiment(deps, caller, req)),
    amendExperiment: async (req, caller) => jsonAnswer(await amendExperiment(deps, caller, req.id, req.json)),
    listExperimentVersions: async (req, caller) => listVersions(deps.db.orm, caller, req.id),
    listExperimentSignatures: async (req, caller) => listSignatures(deps.db.orm, caller, req.id),
  });
}
