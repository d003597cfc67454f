import { DomainError, newId, validationFailed, type BusMessage, type CallerContext, type Emitter } from '@lab/kit';
import { notNamed, type ReferenceTarget } from './references.js';
import type { RecordJson, Resource } from './resource.js';

/**
 * A record that names a department keeps it from being deleted: identity owns
 * the rule and counts what the record services tell it (decision 056). The
 * engine holds the department before a write that names it, and the write's
 * transaction emits what it did (department_ref.changed, with the hold's id);
 * identity lets go of the hold as it counts the event.
 */
export interface DepartmentHolds {
  /** Holds a department of the caller's organisation for one write; false when it has none of that id. */
  hold(caller: CallerContext, resource: string, departmentId: string, holdId: string): Promise<boolean>;
  /** Lets go of the hold of a write that did not commit. */
  release(caller: CallerContext, holdId: string): Promise<void>;
  /** Has identity count a committed write's change now (its event then finds it counted). */
  counted(caller: CallerContext, change: BusMessage): Promise<void>;
}

/** The event a committed write emits for the department its record names (identity consumes it). */
const DEPARTMENT_REF_CHANGED = 'department_ref.changed';

/** The reference field of a resource that names a department of identity, if it has one. */
export function departmentField(r: Pick<Resource, 'references'>): { field: string; target: Extract<ReferenceTarget, { peer: string }> } | undefined {
  for (const [field, target] of Object.entries(r.references ?? {})) {
    if ('peer' in target && target.peer === 'department') return { field, target };
  }
  return undefined;
}

/** The references of a resource less its department (held, not checked). */
export function withoutDepartment(references: Record<string, ReferenceTarget> | undefined): Record<string, ReferenceTarget> | undefined {
  if (!references) return references;
  return Object.fromEntries(Object.entries(references).filter(([, t]) => !('peer' in t && t.peer === 'department')));
}

/**
 * The department a write's body names, held before its transaction. A create
 * that names none may still store the caller's own (an experiment's default):
 * that one is not held, as the caller's membership keeps it from deletion
 * (identity refuses a department with members) until the change is counted.
 */
export function departmentNamed(r: Pick<Resource, 'references'>, body: unknown): string | undefined {
  const d = departmentField(r);
  if (!d || body === null || typeof body !== 'object') return undefined;
  const given = (body as Record<string, unknown>)[d.field];
  return typeof given === 'string' ? given.toLowerCase() : undefined;
}

/** A failure that says the write did not commit: a refusal from inside its transaction. */
const refused = (err: unknown) =>
  err instanceof DomainError && ['invalid', 'forbidden', 'not_found', 'conflict', 'unprocessable', 'too_large'].includes(err.kind);

/** What a write emitted for the department its record names (emitDepartmentChange), once it committed. */
export interface DepartmentChanges {
  /** the write's department_ref.changed, if it emitted one */
  emitted?: BusMessage;
}

/**
 * Runs a write that names `departmentId` (if any) under a hold of it. A write
 * refused lets go of its hold; one that failed otherwise (its commit may have
 * happened) keeps it: a hold too many only refuses a deletion, until identity
 * purges it. After a commit that stopped naming a department, identity counts
 * the change at once (best effort: the event counts it anyway), so that
 * department is free for deletion as soon as the write has answered.
 */
export async function withDepartmentHold<T>(
  holds: DepartmentHolds | undefined,
  caller: CallerContext,
  r: Pick<Resource, 'name' | 'references'>,
  departmentId: string | undefined,
  write: (holdId: string | null, changes: DepartmentChanges) => Promise<T>,
): Promise<T> {
  const d = departmentField(r);
  const changes: DepartmentChanges = {};
  // only a change that stops naming a department is worth the call: an added
  // reference is covered by its hold (or the author's membership) until its event
  const counted = async () => {
    const stopped = (changes.emitted?.data as { from?: string | null } | undefined)?.from;
    if (holds && changes.emitted && stopped) await holds.counted(caller, changes.emitted).catch(() => undefined);
  };
  if (!holds || !d || !departmentId) {
    const out = await write(null, changes);
    await counted();
    return out;
  }
  const holdId = newId();
  if (!(await holds.hold(caller, r.name, departmentId, holdId))) throw validationFailed([notNamed(d.field, d.target.noun)]);
  let out: T;
  try {
    out = await write(holdId, changes);
  } catch (err) {
    if (refused(err)) await holds.release(caller, holdId).catch(() => undefined);
    throw err;
  }
  await counted();
  return out;
}

/** In the write's transaction: what it did to the department its record names, for identity to count. */
export function emitDepartmentChange(
  emit: Emitter,
  caller: CallerContext,
  r: Pick<Resource, 'name' | 'references'>,
  before: RecordJson | null,
  after: RecordJson | null,
  holdId: string | null,
  changes?: DepartmentChanges,
): void {
  const d = departmentField(r);
  if (!d) return;
  const named = (row: RecordJson | null) => (typeof row?.[d.field] === 'string' ? (row[d.field] as string).toLowerCase() : null);
  const from = named(before);
  const to = named(after);
  if (from === to && !holdId) return;
  emit.event(DEPARTMENT_REF_CHANGED, caller.org_id, { resource: r.name, from, to, hold_id: holdId });
  if (changes) changes.emitted = emit.messages[emit.messages.length - 1];
}
