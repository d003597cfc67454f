import path from 'node:path';
import type { ServiceDefinition } from '@lab/kit';
import { registerHandlers } from './server.js';

/** Experiments (entries, display ids, signing), projects and samples. */
export const definition: ServiceDefinition = {
  name: 'notebook',
  schema: 'notebook',
  migrationsDir: path.join(__dirname, '..', 'migrations'),
  register: async (server, deps) => registerHandlers(server, deps),
};

// the shapes the gateway describes in the OpenAPI document and checks at the edge
export { amendBody } from './amendments.js';
export { MEANINGS, type Meaning } from './signatures.js';
