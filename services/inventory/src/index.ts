import path from 'node:path';
import type { ServiceDefinition } from '@lab/kit';
import { registerHandlers } from './server.js';

/** Reagent catalog, stock items, stock movements and physical inventory runs. */
export const definition: ServiceDefinition = {
  name: 'inventory',
  schema: 'inventory',
  migrationsDir: path.join(__dirname, '..', 'migrations'),
  register: async (server, deps) => registerHandlers(server, deps),
};
