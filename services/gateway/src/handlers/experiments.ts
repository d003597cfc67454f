import { itemFromJson, listFromJson, type Reply } from '../replies.js';
import { callerIn, type Ctx, type Deps } from '../request.js';
import { objectBody, recordId } from './records.js';

/** The experiment routes beyond generic CRUD: amendments, versions and signatures of signed records. */
export type ExperimentOp = 'amend' | 'versions' | 'signatures';

/**
 * POST /v1/experiments/{id}/amendments (201, the new version), GET
 * /v1/experiments/{id}/versions and GET /v1/experiments/{id}/signatures (list
 * envelope, whole: an entry's versions and a version's signatures are few). The
 * notebook service checks the body and the rules.
 */
export async function experimentHandler(ctx: Ctx, deps: Deps, op: ExperimentOp): Promise<Reply> {
  const id = recordId(ctx.params);
  const nb = deps.clients.notebook();
  const caller = callerIn(ctx);
  if (op === 'amend') {
    const r = await nb.call('amendExperiment', { id, json: JSON.stringify(objectBody(ctx.body)) }, caller);
    return itemFromJson(201, r.json);
  }
  const r = await nb.call(op === 'versions' ? 'listExperimentVersions' : 'listExperimentSignatures', { id }, caller);
  return listFromJson(r.json, { limit: r.limit, offset: 0, total: Number(r.total) });
}
