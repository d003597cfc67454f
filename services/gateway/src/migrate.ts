import { join } from 'node:path';
import { runMigrationsMain } from '@lab/kit';

/** Entry of the chart's migration hook Job for the gateway's own schema (idempotency records). */
void runMigrationsMain({ name: 'gateway', schema: 'gateway', migrationsDir: join(__dirname, '..', 'migrations') });
