import { sql } from 'drizzle-orm';
import { z } from 'zod';
import { DomainError, parseWith, rows, structBody, type CallerContext, type Executor, type ServiceDeps } from '@lab/kit';
import { assertMay } from '@lab/permissions';
import {
  assertMayWrite,
  checkLocalReferences,
  checkRemoteReferences,
  departmentNamed,
  emitDepartmentChange,
  getRecordOr404,
  insertRecord,
  listRecords,
  parseListQuery,
  withDepartmentHold,
  withoutDepartment,
  type DepartmentHolds,
  type RemoteChecks,
} from '@lab/records';
import { experimentEvents } from './events.js';
import { createExperiment, experiments } from './experiments.js';
import { manifest, signaturesOf } from './signatures.js';
import { experimentIn, experimentOf, signatureMessages } from './answers.js';
import type { notebook } from '@lab/contracts';

/** An amendment: why (required), and the fields that change (any writable field of an experiment). */
export const amendBody = z.strictObject({
  ...createExperiment.shape,
  reason: z.string().trim().min(1).max(2000),
});

/** The content a new version takes over from the version it amends, before the changes apply. */
const CARRIED = ['title', 'description', 'content', 'status', 'tags', 'project_id', 'template_id', 'department_id'] as const;

/**
 * Amends a signed experiment. The signed version stays as it was signed; the
 * amendment is a new experiment record, the next version of the same entry (same
 * display_id, version + 1, amends_id naming the signed one), carrying the reason,
 * unsigned and editable until it is signed in turn. Its author is the one who
 * amends (an API key without a user keeps the signed version's author).
 *
 * Only the latest version is amended: a version already amended is 409
 * already_amended (naming its amendment), so the history is a line. Two
 * amendments at once take turns on the signed version's row lock (and the
 * unique index on amends_id backs that up).
 */
export async function amendExperiment(
  deps: Pick<ServiceDeps, 'outbox'>,
  caller: CallerContext,
  id: string,
  body: Record<string, unknown> | undefined,
  remote: RemoteChecks,
  departmentHolds?: DepartmentHolds,
): Promise<notebook.ExperimentResponse> {
  assertMay(caller, 'write');
  const { reason, ...changes } = parseWith(amendBody, structBody(body));
  // the changes name what an experiment's fields may name, checked (a department held) as the records engine does
  await checkRemoteReferences(departmentHolds ? withoutDepartment(experiments.references) : experiments.references, remote, caller, changes);
  // the department carried from the signed version is covered by that version, which stays
  return withDepartmentHold(departmentHolds, caller, experiments, departmentNamed(experiments, changes), (holdId, departmentChanges) =>
    deps.outbox.write(
      caller,
      async (tx, emit) => {
        const signed = await getRecordOr404(tx, experiments, caller, id, { lock: 'no key update' });
        assertMayWrite(experiments, caller, signed.row);
        if (!signed.row.signed_at) {
          throw DomainError.conflict('the experiment is not signed; change it with PATCH', 'experiment_not_signed');
        }
        const [next] = await rows<{ id: string }>(
          tx,
          sql`select id from notebook.experiments where org_id = ${caller.org_id}::uuid and amends_id = ${id}::uuid`,
        );
        if (next) throw DomainError.conflict('this version is amended already; amend its latest version', 'already_amended', { amendment_id: next.id });
        await checkLocalReferences(tx, experiments.references, caller, changes);
        const carried = Object.fromEntries(CARRIED.map((k) => [k, signed.row[k] ?? null]));
        const given = Object.fromEntries(Object.entries(changes as Record<string, unknown>).filter(([, v]) => v !== undefined));
        const created = await insertRecord(tx, experiments, caller, {
          ...carried,
          ...given,
          display_id: signed.row.display_id,
          version: Number(signed.row.version) + 1,
          amends_id: id,
          amendment_reason: reason,
          author_id: caller.user_id ?? signed.row.author_id ?? null,
        });
        // a new record in the experiments list: integrations that mirror it hear of it
        experimentEvents.created(emit, caller, created.row);
        emitDepartmentChange(emit, caller, experiments, null, created.row, holdId, departmentChanges);
        emit.audit(caller.org_id, {
          action: 'amend',
          resource: experiments.auditResource,
          record_id: String(created.row.id),
          before: signed.row,
          after: created.row,
          reason,
        });
        return { experiment: experimentOf(created) };
      },
      (answer) => answer,
    ),
  );
}

/** Versions of one entry a list answers at most; an entry amended more often than this is not expected. */
const MAX_VERSIONS = 500;

/** Every version of the entry the experiment belongs to that the caller may see, oldest first. */
export async function listVersions(exec: Executor, caller: CallerContext, id: string): Promise<notebook.ExperimentList> {
  const found = await getRecordOr404(exec, experiments, caller, id);
  const q = parseListQuery({ display_id: String(found.row.display_id), order_by: 'version', order: 'asc', limit: String(MAX_VERSIONS) }, experiments);
  const page = await listRecords(exec, experiments, caller, q);
  return { experiments: page.records.map(experimentIn), total: page.total, limit: page.shown, offset: 0, cut_by_size: page.cut };
}

/** The signature manifest of one experiment version, in signing order. */
export async function listSignatures(exec: Executor, caller: CallerContext, id: string): Promise<notebook.SignatureList> {
  const found = await getRecordOr404(exec, experiments, caller, id);
  const list = manifest(await signaturesOf(exec, caller, id), found.row);
  return { signatures: signatureMessages(list) };
}
