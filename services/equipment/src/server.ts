import { recordsWire } from '@lab/contracts';
import { withConstraintErrors, type GrpcServer, type ServiceDeps } from '@lab/kit';
import { PeerReferences, recordServiceHandlers } from '@lab/records';
import { registerCalendarHandlers } from './calendar-service.js';
import { CONSTRAINT_RULES } from './constraint-errors.js';
import { calibrations, qualifications } from './documents.js';
import { equipment } from './equipment.js';
import { maintenance } from './maintenance.js';
import { remote, remoteLinkHandlers } from './remote.js';
import { usage } from './usage.js';

const resources = [equipment, usage, maintenance, calibrations, qualifications, remote];

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
  const base = recordServiceHandlers(deps, resources, { remote, departmentHolds: peers.departmentHolds });
  server.add(recordsWire.service, withConstraintErrors(remoteLinkHandlers(base, deps.db), CONSTRAINT_RULES));
  registerCalendarHandlers(server, deps);
  return async () => peers.close();
}
