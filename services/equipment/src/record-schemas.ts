import { recordListing as listing } from '@lab/records';
import { calibrations, qualifications } from './documents.js';
import { equipment } from './equipment.js';
import { maintenance } from './maintenance.js';
import { remote } from './remote.js';
import { usage } from './usage.js';

/**
 * The zod schemas this service validates record bodies with, for the gateway's
 * OpenAPI document: it describes create and update bodies from these very
 * schemas, so the document cannot promise a field the service refuses; with
 * the columns a list may be ordered and filtered by.
 */
export const RECORD_BODIES = {
  equipment: listing(equipment),
  'equipment/usage': listing(usage),
  'equipment/maintenance': listing(maintenance),
  'equipment/calibrations': listing(calibrations),
  'equipment/qualifications': listing(qualifications),
  'equipment/remote': listing(remote),
};
