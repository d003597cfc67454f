import { sql } from 'drizzle-orm';
import { DomainError, newId, rows, type CallerContext, type ServiceDeps } from '@lab/kit';
import { getRecordOr404 } from '@lab/records';
import type { notebook } from '@lab/contracts';
import { assertMay } from '@lab/permissions';
import { experimentOf, signatureMessages } from './answers.js';
import { contentHash } from './content-hash.js';
import { experimentEvents } from './events.js';
import { experiments } from './experiments.js';
import { assertMayAuthor, assertMaySign, authorsOf, manifest, parseMeaning, signaturesOf } from './signatures.js';

/**
 * Signs an experiment version as the calling user (the gateway has re-verified
 * the password), with a meaning, bound to the hash of the content signed.
 * Authorship is its author's who may change it (assertMayAuthor); review and
 * approval anyone's who may sign and is no author of the entry (assertMaySign).
 * Signings of one experiment take turns on its row lock, so of two at once the
 * second sees the first's signature. The authorship signature also sets
 * signed_at / signed_by (by a conditional update, as it always did), which locks
 * the experiment, and emits experiment.signed.
 */
export async function signExperiment(
  deps: Pick<ServiceDeps, 'outbox'>,
  caller: CallerContext,
  req: notebook.SignExperimentRequest,
): Promise<notebook.SignedExperiment> {
  if (caller.token_kind !== 'session' || !caller.user_id) {
    throw DomainError.forbidden('only a signed-in user can sign an experiment');
  }
  assertMay(caller, 'sign');
  const userId = caller.user_id;
  const meaning = parseMeaning(req.meaning);
  const { id } = req;
  return deps.outbox.write(
    caller,
    async (tx, emit) => {
      const before = await getRecordOr404(tx, experiments, caller, id, { lock: 'no key update' });
      if (meaning === 'authorship') assertMayAuthor(caller, before.row);
      const signed = await signaturesOf(tx, caller, id);
      const authors = meaning === 'authorship' ? new Set<string>() : await authorsOf(tx, caller, String(before.row.display_id));
      assertMaySign(userId, meaning, signed, authors);
      await tx.execute(
        sql`insert into notebook.experiment_signatures (id, org_id, experiment_id, meaning, signer_id, signer_name, content_hash)
          values (${newId()}::uuid, ${caller.org_id}::uuid, ${id}::uuid, ${meaning}, ${userId}::uuid, ${req.signer_name || null}, ${contentHash(before.row)})`,
      );
      if (meaning === 'authorship') {
        const won = await rows<{ id: string }>(
          tx,
          sql`update notebook.experiments set signed_at = now(), signed_by = ${userId}::uuid, updated_at = now()
            where id = ${id}::uuid and org_id = ${caller.org_id}::uuid and signed_at is null
            returning id`,
        );
        if (!won.length) throw DomainError.conflict('the experiment is already signed', 'already_signed');
      }
      const after = await getRecordOr404(tx, experiments, caller, id, { allVisible: true });
      const signatures = manifest(await signaturesOf(tx, caller, id), after.row);
      if (meaning === 'authorship') experimentEvents.signed(emit, caller, after.row);
      // the manifest is part of what the audit entry shows changing
      emit.audit(caller.org_id, {
        action: 'sign',
        resource: experiments.auditResource,
        record_id: id,
        before: { ...before.row, signatures: manifest(signed, before.row) },
        after: { ...after.row, signatures },
        meaning,
      });
      return { experiment: experimentOf(after), signatures: signatureMessages(signatures) };
    },
    (answer) => answer,
  );
}
