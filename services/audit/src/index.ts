import { join } from 'node:path';
import { EVENT_ROUTES } from '@lab/contracts';
import { Batcher, type AuditRecordData, type BusMessage, type ServiceDefinition } from '@lab/kit';
import { storeRecords } from './audit-log.js';
import { registerHandlers } from './server.js';

/**
 * The audit service: consumes every `audit.record` message from the events
 * exchange into its log and serves the keyset-paged read behind GET /v1/audit.
 */
export const definition: ServiceDefinition = {
  name: 'audit',
  schema: 'audit',
  migrationsDir: join(__dirname, '..', 'migrations'),
  async register(server, deps) {
    const { bus, db } = deps;
    // The record id is the message id and the table's primary key, so the insert
    // itself drops duplicates: no separate inbox row is needed per message.
    // Messages in flight together (up to the prefetch) are stored together.
    const store = new Batcher<BusMessage<AuditRecordData>>((msgs) => storeRecords(db.orm, msgs), 200);
    await bus.subscribe({
      ...EVENT_ROUTES.auditRecords,
      prefetch: 200,
      handler: (msg) => store.add(msg as BusMessage<AuditRecordData>),
      // the in-process bus hands over a relay batch at once: stored together too
      handleBatch: async (msgs) => {
        await storeRecords(db.orm, msgs as BusMessage<AuditRecordData>[]);
      },
    });
    registerHandlers(server, deps);
  },
};

export { listRecords, storeRecords } from './audit-log.js';
export { verifyChain } from './chain.js';
