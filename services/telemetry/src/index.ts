import path from 'node:path';
import { z } from 'zod';
import { loadConfig, openFileStore, type FileStore, type FileStoreKind, type ServiceDefinition } from '@lab/kit';
import { registerHandlers } from './server.js';

export { rawFileLimit, isMzml, RawFileAllowance, RAW_FILE_MAX_BYTES, MZML_MAX_BYTES } from './raw-file-limits.js';

export interface TelemetryOptions {
  /** where raw result files are kept; default TELEMETRY_FILE_STORE, else the service's schema on a PostgreSQL server and the directory embedded */
  fileStore?: FileStoreKind;
  /** directory of the filesystem store (and of files from before a switch); default TELEMETRY_STORAGE_DIR, else <data dir>/raw-files */
  storageDir?: string;
}

const telemetryEnv = z.object({
  TELEMETRY_FILE_STORE: z.enum(['postgres', 'filesystem']).optional(),
  TELEMETRY_STORAGE_DIR: z.string().optional(),
});

/**
 * Devices, measurement results and raw result files, connectors, environmental
 * points and readings (module analytics_qc).
 */
export function telemetryDefinition(opts: TelemetryOptions = {}): ServiceDefinition {
  // opened at start, kept for the retention rule
  let files: FileStore | undefined;
  return {
    name: 'telemetry',
    schema: 'telemetry',
    migrationsDir: path.join(__dirname, '..', 'migrations'),
    // the settings are read when the service starts, so a test can point them elsewhere first
    register: async (server, deps) => {
      const env = loadConfig(telemetryEnv);
      files = openFileStore(deps.db, 'telemetry', {
        kind: opts.fileStore ?? env.TELEMETRY_FILE_STORE,
        dir: opts.storageDir ?? env.TELEMETRY_STORAGE_DIR ?? path.join(deps.dataDir, 'raw-files'),
      });
      registerHandlers(server, deps, files);
    },
    retention: () => [['raw files of uploads whose process died', () => files!.sweep()]],
  };
}

export const definition: ServiceDefinition = telemetryDefinition();

export { pointSchemas } from './points.js';
export { readingSchemas } from './readings.js';
export { deviceSchemas } from './devices.js';
export { resultSchemas } from './results.js';
export { connectorSchemas } from './connectors.js';
