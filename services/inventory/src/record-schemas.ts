import { recordListing as listing } from '@lab/records';
import { inventories } from './inventories.js';
import { reagents } from './reagents.js';
import { stockItems } from './stock-items.js';
import { stockMovements } from './stock-movements.js';

/**
 * The zod schemas this service validates record bodies with, for the gateway's
 * OpenAPI document: it describes create and update bodies from these very
 * schemas, so the document cannot promise a field the service refuses; with
 * the columns a list may be ordered and filtered by.
 */
export const RECORD_BODIES = {
  reagents: listing(reagents),
  'stock-items': listing(stockItems),
  // created and read, never updated
  'stock-movements': { ...listing(stockMovements), update: undefined },
  inventories: listing(inventories),
};
