import { telemetryWire } from '@lab/contracts';
import { withConstraintErrors, type FileStore, type GrpcServer, type ServiceDeps } from '@lab/kit';
import { connectorHandlers } from './connectors.js';
import { RULES } from './constraints.js';
import { deviceHandlers } from './devices.js';
import { keyBindingHandlers } from './key-bindings.js';
import { pointHandlers } from './points.js';
import { rawFileHandlers, rawFileReader } from './raw-files.js';
import { readingHandlers } from './readings.js';
import { resultHandlers } from './results.js';

export function registerHandlers(server: GrpcServer, deps: ServiceDeps, files: FileStore): void {
  server.add(telemetryWire.service, {
    ...withConstraintErrors(
      {
        ...pointHandlers(deps),
        ...readingHandlers(deps),
        ...deviceHandlers(deps),
        ...resultHandlers(deps),
        ...rawFileHandlers(deps, files),
        ...connectorHandlers(deps),
        ...keyBindingHandlers(deps),
      },
      RULES,
    ),
    // a server stream: its handler gives the stream itself, which withConstraintErrors (for promises) would not pass on
    ...rawFileReader(deps, files),
  });
}
