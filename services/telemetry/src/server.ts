import { telemetryWire } from '@lab/contracts';
import { withConstraintErrors, type GrpcServer, type ServiceDeps } from '@lab/kit';
import { connectorHandlers } from './connectors.js';
import { RULES } from './constraints.js';
import { deviceHandlers } from './devices.js';
import { keyBindingHandlers } from './key-bindings.js';
import { pointHandlers } from './points.js';
import { rawFileHandlers } from './raw-files.js';
import { readingHandlers } from './readings.js';
import { resultHandlers } from './results.js';
import type { FileStorage } from './storage.js';

export function registerHandlers(server: GrpcServer, deps: ServiceDeps, storage: FileStorage): void {
  server.add(
    telemetryWire.service,
    withConstraintErrors(
      {
        ...pointHandlers(deps),
        ...readingHandlers(deps),
        ...deviceHandlers(deps),
        ...resultHandlers(deps),
        ...rawFileHandlers(deps, storage),
        ...connectorHandlers(deps),
        ...keyBindingHandlers(deps),
      },
      RULES,
    ),
  );
}
