import { experimentJson, signaturesJson } from '@lab/contracts';
import { type ExperimentOp, itemFromJson, listFromJson, withLocation, type Reply } from '@lab/http-api';
import { callerIn, type Ctx, type Deps } from '../request.js';
import { objectBody, recordId } from './records.js';

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
    const r = await nb.call('amendExperiment', { id, body: objectBody(ctx.body) }, caller);
    // the new version is an experiment of its own
    return withLocation(itemFromJson(201, experimentJson(r.experiment!)), '/v1/experiments', r.experiment!.id);
  }
  if (op === 'versions') {
    const r = await nb.call('listExperimentVersions', { id }, caller);
    return listFromJson(`[${r.experiments.map(experimentJson).join(',')}]`, { limit: r.limit, offset: 0, total: r.total });
  }
  // a manifest is answered whole
  const { signatures } = await nb.call('listExperimentSignatures', { id }, caller);
  return listFromJson(signaturesJson(signatures), { limit: signatures.length, offset: 0, total: signatures.length });
}
