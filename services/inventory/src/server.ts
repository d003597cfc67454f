import { recordsWire } from '@lab/contracts';
import { type GrpcServer, type ServiceDeps } from '@lab/kit';
import { PeerReferences, recordServiceHandlers } from '@lab/records';
import { inventories } from './inventories.js';
import { reagents } from './reagents.js';
import { refuseMovementUpdate, stockMovements } from './stock-movements.js';
import { stockItems } from './stock-items.js';
import { translateReagentInUse } from './reagent-in-use.js';

const resources = [reagents, stockItems, stockMovements, inventories];

/** Registers the record service; returns what closes its clients of other services. */
export function registerHandlers(server: GrpcServer, deps: ServiceDeps): () => Promise<void> {
  // members and departments are identity's; experiment entries the notebook's
  const peers = new PeerReferences(deps);
  const remote = { member: peers.member, department: peers.department, 'notebook.experiments': peers.record('notebook', 'experiments') };
  const generic = recordServiceHandlers(deps, resources, { remote, departmentHolds: peers.departmentHolds });
  server.add(recordsWire.service, {
    ...generic,
    updateRecord: async (req, caller) => (req.resource === stockMovements.name ? refuseMovementUpdate() : generic.updateRecord(req, caller)),
    deleteRecord: (req, caller) => translateReagentInUse(req.resource === reagents.name, () => generic.deleteRecord(req, caller)),
  });
  return async () => peers.close();
}
