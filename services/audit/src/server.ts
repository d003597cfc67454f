import { audit, chainReportMessage } from '@lab/contracts';
import { assertOperator, DomainError, isUuid, type GrpcServer, type ServiceDeps } from '@lab/kit';
import { listRecords, parseListRequest } from './audit-log.js';
import { NIL_UUID, verifyChain } from './chain.js';

/** The audit service's RPCs: the keyset-paged read behind GET /v1/audit and the operator's chain check. */
export function registerHandlers(server: GrpcServer, { db }: ServiceDeps): void {
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
      assertOperator(caller, 'verifying the audit chain');
      if (!isUuid(req.org_id)) throw DomainError.notFound('organisation not found');
      // the nil UUID names the chain of entries without an organisation
      const org = req.org_id.toLowerCase();
      return chainReportMessage(await verifyChain(db, org === NIL_UUID ? null : org));
    },
  });
}
