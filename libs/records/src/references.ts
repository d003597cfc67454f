import { sql } from 'drizzle-orm';
import { type CallerContext, rows, type Tx, validationFailed, type FieldIssue } from '@lab/kit';
import type { RecordJson } from './resource.js';

/**
 * The record a reference field names, if it belongs to the caller's organisation;
 * anything else is a 400 on that field (a record of another organisation is not
 * revealed to exist). `table` is a schema-qualified table of the calling service,
 * a constant of its code. The row is held (FOR KEY SHARE) to the end of the
 * write's transaction: a delete at the same moment waits, rather than leaving the
 * write's foreign key to fail (a 500) after this check said yes.
 */
export async function sameOrgRecord(tx: Tx, caller: CallerContext, field: string, table: string, id: string, noun = 'record'): Promise<RecordJson> {
  const [found] = await rows<{ json: string }>(
    tx,
    sql`select row_to_json(t)::text as json from ${sql.raw(table)} t where t.id = ${id}::uuid and t.org_id = ${caller.org_id}::uuid
        for key share of t`,
  );
  if (!found) throw validationFailed([notNamed(field, noun)]);
  return JSON.parse(found.json) as RecordJson;
}

/** As sameOrgRecord, for a reference that may be absent (null or not given). */
export async function assertSameOrgReference(
  tx: Tx,
  caller: CallerContext,
  field: string,
  table: string,
  id: string | null | undefined,
  noun = 'record',
): Promise<void> {
  if (id == null) return;
  const found = await rows<{ id: string }>(
    tx,
    sql`select t.id from ${sql.raw(table)} t where t.id = ${id}::uuid and t.org_id = ${caller.org_id}::uuid for key share of t`,
  );
  if (!found.length) throw validationFailed([notNamed(field, noun)]);
}

/** The one wording of a reference that names nothing the caller may refer to. */
export const notNamed = (field: string, noun: string): FieldIssue => ({ path: field, message: `${field} names no ${noun} of this organisation` });

/**
 * What a reference field of a resource names, declared with the resource so the
 * records engine checks it on every create, PUT and PATCH that gives it:
 * - `table`: a record of this service (schema-qualified table with id and
 *   org_id), looked up by primary key in the write's transaction, org-scoped, and
 *   held FOR KEY SHARE to its end (sameOrgRecord);
 * - `peer`: a record another service owns, asked through the RemoteCheck the
 *   service registered under that name, before the write's transaction (a call to
 *   another process is not made while rows are locked).
 * `noun` names the target in the 400 ("names no department of this organisation").
 */
export type ReferenceTarget = { noun: string; table: string } | { noun: string; peer: string };

/**
 * Of `ids` (lower-case UUIDs), those that name a record of the caller's
 * organisation the caller may refer to. Anything else is refused as not named:
 * the owner's 404 of another organisation's record is not told apart.
 */
export type RemoteCheck = (caller: CallerContext, ids: string[]) => Promise<Set<string>>;

export type RemoteChecks = Record<string, RemoteCheck>;

/** The declared references a body gives a value (null clears a reference: nothing to check). */
function given(references: Record<string, ReferenceTarget> | undefined, body: unknown): { field: string; id: string; target: ReferenceTarget }[] {
  if (!references || body === null || typeof body !== 'object') return [];
  const values = body as Record<string, unknown>;
  const out = [];
  for (const [field, target] of Object.entries(references)) {
    const id = values[field];
    if (typeof id === 'string') out.push({ field, id: id.toLowerCase(), target });
  }
  return out;
}

/**
 * Checks the references into other services that a parsed body gives: one call
 * per peer however many fields name it, every field not named listed in one 400.
 * A body without such a reference costs nothing.
 */
export async function checkRemoteReferences(
  references: Record<string, ReferenceTarget> | undefined,
  remote: RemoteChecks,
  caller: CallerContext,
  body: unknown,
): Promise<void> {
  const byPeer = new Map<string, { field: string; id: string; noun: string }[]>();
  for (const { field, id, target } of given(references, body)) {
    if (!('peer' in target)) continue;
    byPeer.set(target.peer, [...(byPeer.get(target.peer) ?? []), { field, id, noun: target.noun }]);
  }
  if (!byPeer.size) return;
  const issues: FieldIssue[] = [];
  await Promise.all(
    [...byPeer].map(async ([peer, refs]) => {
      const check = remote[peer];
      // a declaration without its check is a wiring fault of the service, not the caller's
      if (!check) throw new Error(`no reference check registered for ${peer}`);
      const found = await check(caller, [...new Set(refs.map((r) => r.id))]);
      for (const r of refs) if (!found.has(r.id)) issues.push(notNamed(r.field, r.noun));
    }),
  );
  if (issues.length) throw validationFailed(issues.sort((a, b) => a.path.localeCompare(b.path)));
}

/**
 * Checks the references to this service's own records that a parsed body gives,
 * in the write's transaction: one primary-key lookup per reference given.
 */
export async function checkLocalReferences(
  tx: Tx,
  references: Record<string, ReferenceTarget> | undefined,
  caller: CallerContext,
  body: unknown,
): Promise<void> {
  for (const { field, id, target } of given(references, body)) {
    if ('table' in target) await assertSameOrgReference(tx, caller, field, target.table, id, target.noun);
  }
}
