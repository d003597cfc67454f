import { recordListing as listing } from '@lab/records';
import { experiments } from './experiments.js';
import { projects } from './projects.js';
import { samples } from './samples.js';

/**
 * The zod schemas this service validates record bodies with, for the gateway's
 * OpenAPI document: it describes create and update bodies from these very
 * schemas, so the document cannot promise a field the service refuses; with
 * the columns a list may be ordered and filtered by.
 */
export const RECORD_BODIES = {
  experiments: listing(experiments),
  projects: listing(projects),
  samples: listing(samples),
};
