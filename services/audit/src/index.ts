import { join } from 'node:path';
import { audit, chainReportMessage, EVENT_ROUTES } from '@lab/contracts';
import { Batcher, DomainError, isUuid, type AuditRecordData, type BusMessage, type ServiceDefinition } from '@lab/kit';
import { listRecords, parseListRequest, storeRecords } from './audit-log.js';
import { NIL_UUID, verifyChain } from './chain.js';

/**
 * The audit service: consumes every `audit.record` message from the events
 * exchange into its log and serves the keyset-paged read behind GET /v1/audit.
 */
export const definition: ServiceDefinition = {
  name: 'audit',
  schema: 'audit',
  migrationsDir: join(__dirname, '..', 'migrations'),
  async register(server, { bus, db }) {
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
    server.add(audit.AuditServiceService, {
      listAudit: async (req, caller) => {
        if (!caller.org_id) throw DomainError.forbidden('an organisation is required', 'org_required');
        const page = await listRecords(db, caller.org_id, parseListRequest(req));
        return {
          records: page.records,
          count: page.count,
          next_since_created_at: page.next?.since_created_at,
          next_since_id: page.next?.since_id,
        };
      },
      verifyChain: async (req, caller) => {
        if (caller.token_kind !== 'operator') throw DomainError.forbidden('verifying the audit chain needs the operator token');
        if (!isUuid(req.org_id)) throw DomainError.notFound('organisation not found');
        // the nil UUID names the chain of entries without an organisation
        const org = req.org_id.toLowerCase();
        return chainReportMessage(await verifyChain(db, org === NIL_UUID ? null : org));
      },
    });
  },
};

export { listRecords, storeRecords } from './audit-log.js';
export { verifyChain } from './chain.js';
