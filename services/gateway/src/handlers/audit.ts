import { auditRecordsJson, chainReportJson } from '@lab/contracts';
import { auditQuery, itemFromJson, json, jsonBody, JSON_TYPE, type Reply } from '@lab/http-api';
import { isUuid } from '@lab/kit';
import { callerIn, type Ctx, type Deps } from '../request.js';
import { parseWith } from '../validation.js';
import { queryMap } from './records.js';
import { requireKnownOrg } from './known-org.js';

/** GET /v1/audit: keyset-paged audit log of the caller's organisation. */
export async function listAudit(ctx: Ctx, deps: Deps): Promise<Reply> {
  const q = parseWith(auditQuery, queryMap(ctx.req.query as Record<string, unknown>), 'invalid audit query');
  const r = await deps.clients.audit().call('listAudit', q, callerIn(ctx));
  const next = r.next_since_created_at && r.next_since_id ? JSON.stringify({ since_created_at: r.next_since_created_at, since_id: r.next_since_id }) : 'null';
  return {
    status: 200,
    body: jsonBody('{"data":', auditRecordsJson(r.records), `,"next_cursor":${next},"count":${r.count}}`),
    contentType: JSON_TYPE,
  };
}

/**
 * How long a verification may run: it recomputes every entry's hash (about 30 s
 * per million entries on a development machine), far past the default deadline
 * of a call.
 */
const VERIFY_DEADLINE_MS = 15 * 60_000;

/**
 * GET /admin/v1/orgs/{org_id}/audit/verify: the organisation's audit hash chain
 * walked and checked by the audit service. 200 either way: the answer is a
 * report, {ok: true, entries, head_hash} or {ok: false, entries, broken}.
 */
export async function verifyAuditChain(ctx: Ctx, deps: Deps): Promise<Reply> {
  const org_id = (ctx.params.org_id ?? '').toLowerCase();
  if (!isUuid(org_id)) return json(404, { error: { code: 'not_found', message: 'organisation not found' } });
  await requireKnownOrg(org_id, ctx, deps);
  const r = await deps.clients.audit().call('verifyChain', { org_id }, callerIn(ctx), VERIFY_DEADLINE_MS);
  return itemFromJson(200, chainReportJson(r));
}
