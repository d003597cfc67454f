import { sql } from 'drizzle-orm';
import { DomainError, getRecordOr404, jsonAnswer, rows, type CallerContext, type ServiceDeps } from '@lab/kit';
import { experimentEvents } from './events.js';
import { experiments } from './experiments.js';

/**
 * Signs an experiment as the calling user (the gateway has re-verified the
 * password). Only the first signing wins: the UPDATE is conditional on
 * signed_at being null, so of two concurrent signings the second waits for the
 * row lock, then matches nothing and gets 409 already_signed.
 */
export async function signExperiment(deps: Pick<ServiceDeps, 'outbox'>, caller: CallerContext, id: string): Promise<string> {
  if (caller.token_kind !== 'session' || !caller.user_id) {
    throw DomainError.forbidden('only a signed-in user can sign an experiment');
  }
  if (caller.role === 'viewer') throw DomainError.forbidden('the viewer role cannot sign experiments');
  return deps.outbox.write(caller, async (tx, emit) => {
    const before = await getRecordOr404(tx, experiments, caller, id);
    const won = await rows<{ id: string }>(
      tx,
      sql`update notebook.experiments set signed_at = now(), signed_by = ${caller.user_id}::uuid, updated_at = now()
          where id = ${id}::uuid and org_id = ${caller.org_id}::uuid and signed_at is null
          returning id`,
    );
    if (!won.length) throw DomainError.conflict('the experiment is already signed', 'already_signed');
    const after = await getRecordOr404(tx, experiments, caller, id, { allVisible: true });
    experimentEvents.signed(emit, caller, after.row);
    emit.audit(caller.org_id, { action: 'sign', resource: experiments.auditResource, record_id: id, before: before.row, after: after.row });
    return after.json;
  }, jsonAnswer);
}
