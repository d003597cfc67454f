import path from 'node:path';
import type { ServiceDefinition } from '@lab/kit';
import { registerHandlers } from './server.js';
import { DirectoryStorage } from './storage.js';

export { rawFileLimit, isMzml, RawFileAllowance, RAW_FILE_MAX_BYTES, MZML_MAX_BYTES } from './raw-file-limits.js';

export interface TelemetryOptions {
  /** directory of raw result files; default TELEMETRY_STORAGE_DIR, else <data dir>/raw-files */
  storageDir?: string;
}

const defaultStorageDir = (dataDir: string) => process.env.TELEMETRY_STORAGE_DIR ?? path.join(dataDir, 'raw-files');

/**
 * Devices, measurement results and raw result files, connectors, environmental
 * points and readings (module analytics_qc).
 */
export function telemetryDefinition(opts: TelemetryOptions = {}): ServiceDefinition {
  return {
    name: 'telemetry',
    schema: 'telemetry',
    migrationsDir: path.join(__dirname, '..', 'migrations'),
    // the directory is read when the service starts, so a test can point it elsewhere first
    register: async (server, deps) => registerHandlers(server, deps, new DirectoryStorage(path.resolve(opts.storageDir ?? defaultStorageDir(deps.dataDir)))),
  };
}

export const definition: ServiceDefinition = telemetryDefinition();

export { pointSchemas } from './points.js';
export { readingSchemas } from './readings.js';
export { deviceSchemas } from './devices.js';
export { resultSchemas } from './results.js';
export { connectorSchemas } from './connectors.js';
