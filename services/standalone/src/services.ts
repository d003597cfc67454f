import type { ServiceDefinition } from '@lab/kit';
import { definition as identity } from '@lab/identity';
import { definition as notebook } from '@lab/notebook';
import { definition as audit } from '@lab/audit';
import { definition as inventory } from '@lab/inventory';
import { definition as equipment } from '@lab/equipment';
import { definition as webhooks } from '@lab/webhooks';
import { definition as telemetry } from '@lab/telemetry';
import { definition as orders } from '@lab/orders';
import { definition as notifications } from '@lab/notifications';
import { definition as jobs } from '@lab/jobs';

/** Every domain service, in start order (identity first: the gateway needs it). */
export const serviceDefinitions: ServiceDefinition[] = [identity, notebook, audit, inventory, equipment, webhooks, telemetry, orders, notifications, jobs];
