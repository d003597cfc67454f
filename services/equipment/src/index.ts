import path from 'node:path';
import { z } from 'zod';
import { loadConfig, type ServiceDefinition } from '@lab/kit';
import { registerHandlers } from './server.js';
import { startUsageSweep } from './usage-sweep.js';

export { closeOverdueSessions } from './usage-sweep.js';

const equipmentEnv = z.object({
  /** usage sessions open longer than this many hours are closed automatically */
  EQUIPMENT_USAGE_MAX_HOURS: z.coerce
    .number()
    .positive()
    .max(24 * 365)
    .default(12),
  /** how often the auto-close sweep runs */
  EQUIPMENT_USAGE_SWEEP_MS: z.coerce.number().int().min(10).max(3_600_000).default(60_000),
});

export interface EquipmentOptions {
  /** overrides EQUIPMENT_USAGE_MAX_HOURS (fractions allowed, for tests) */
  usageMaxHours?: number;
  /** overrides EQUIPMENT_USAGE_SWEEP_MS */
  sweepIntervalMs?: number;
}

/** Equipment with usage, maintenance, calibrations, qualifications and its remote link. */
export function equipmentDefinition(opts: EquipmentOptions = {}): ServiceDefinition {
  return {
    name: 'equipment',
    schema: 'equipment',
    migrationsDir: path.join(__dirname, '..', 'migrations'),
    register: async (server, deps) => {
      const env = loadConfig(equipmentEnv);
      const closePeers = registerHandlers(server, deps);
      const stopSweep = startUsageSweep(deps, {
        maxHours: opts.usageMaxHours ?? env.EQUIPMENT_USAGE_MAX_HOURS,
        intervalMs: opts.sweepIntervalMs ?? env.EQUIPMENT_USAGE_SWEEP_MS,
      });
      return async () => {
        await stopSweep();
        await closePeers();
      };
    },
  };
}

export const definition: ServiceDefinition = equipmentDefinition();
