import { records } from '@lab/contracts';
import { PeerReferences, recordServiceHandlers, withConstraintErrors, type GrpcServer, type Handlers, type ServiceDeps } from '@lab/kit';
import { CONSTRAINT_RULES } from './constraint-errors.js';
import { calibrations, documentResources, flattenDocument, flattenDocuments, qualifications } from './documents.js';
import { equipment } from './equipment.js';
import { maintenance } from './maintenance.js';
import { remote, remoteLinkHandlers } from './remote.js';
import { usage } from './usage.js';

type RecordHandlers = Handlers<typeof records.RecordServiceService>;

export const resources = [equipment, usage, maintenance, calibrations, qualifications, remote];

/** Calibrations and qualifications leave the service flattened (see documents.ts). */
function withFlatDocuments(base: RecordHandlers): RecordHandlers {
  const isDoc = (resource: string) => documentResources.has(resource);
  return {
    ...base,
    listRecords: async (req, caller) => {
      const page = await base.listRecords(req, caller);
      return isDoc(req.resource) ? { ...page, json: flattenDocuments(page.json) } : page;
    },
    getRecord: async (req, caller) => {
      const r = await base.getRecord(req, caller);
      return isDoc(req.resource) ? { json: flattenDocument(r.json) } : r;
    },
    createRecord: async (req, caller) => {
      const r = await base.createRecord(req, caller);
      return isDoc(req.resource) ? { json: flattenDocument(r.json) } : r;
    },
    updateRecord: async (req, caller) => {
      const r = await base.updateRecord(req, caller);
      return isDoc(req.resource) ? { json: flattenDocument(r.json) } : r;
    },
  };
}

/** Registers the record service; returns what closes its clients of other services. */
export function registerHandlers(server: GrpcServer, deps: ServiceDeps): () => Promise<void> {
  // members and departments are identity's; projects and experiment entries the notebook's
  const peers = new PeerReferences(deps);
  const remote = {
    member: peers.member,
    department: peers.department,
    'notebook.projects': peers.record('notebook', 'projects'),
    'notebook.experiments': peers.record('notebook', 'experiments'),
  };
  const base = recordServiceHandlers(deps, resources, { remote });
  server.add(records.RecordServiceService, withConstraintErrors(withFlatDocuments(remoteLinkHandlers(base, deps.db)), CONSTRAINT_RULES));
  return async () => peers.close();
}
