import { records } from '@lab/contracts';
import { recordServiceHandlers, type GrpcServer, type ServiceDeps } from '@lab/kit';
import { inventories } from './inventories.js';
import { reagents } from './reagents.js';
import { refuseMovementUpdate, stockMovements } from './stock-movements.js';
import { stockItems } from './stock-items.js';
import { translateReagentInUse } from './reagent-in-use.js';

export const resources = [reagents, stockItems, stockMovements, inventories];

export function registerHandlers(server: GrpcServer, deps: ServiceDeps): void {
  const generic = recordServiceHandlers(deps, resources);
  server.add(records.RecordServiceService, {
    ...generic,
    updateRecord: async (req, caller) => (req.resource === stockMovements.name ? refuseMovementUpdate() : generic.updateRecord(req, caller)),
    deleteRecord: (req, caller) => translateReagentInUse(req.resource === reagents.name, () => generic.deleteRecord(req, caller)),
  });
}
