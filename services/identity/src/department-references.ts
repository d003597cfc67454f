import { sql } from 'drizzle-orm';
import { z } from 'zod';
import { departmentReferences, EVENT_ROUTES } from '@lab/contracts';
import {
  consumeWithInbox,
  deleteInBatches,
  DomainError,
  isUuid,
  rows,
  type BusMessage,
  type CallerContext,
  type Database,
  type GrpcServer,
  type ServiceDeps,
  type Tx,
} from '@lab/kit';
import { parse } from './validation.js';

/**
 * "A department that records still name cannot be deleted", kept by identity,
 * which owns departments (decision 056). It cannot read the records, which are
 * the notebook's, inventory's and equipment's; so they tell it, in two steps that
 * leave no moment uncovered:
 *
 * 1. Before a write that names a department, the record service holds it
 *    (HoldDepartment, a new hold id per write): a row here, kept by foreign key,
 *    so the hold and a deletion take turns on the department's row. A department
 *    already gone is a NOT_FOUND, the write's 400.
 * 2. The write commits with a department_ref.changed event in its outbox
 *    (resource, from, to, hold id): exactly the writes that committed, however
 *    late. Counting it here (per department and resource, +1 for `to`, -1 for
 *    `from`) lets go of its hold in the same transaction.
 *
 * So from before the write until its count, either the hold or the count covers
 * the department; a deletion (deleteDepartment, orgs.ts) locks the department and
 * is refused while either is there. A write that fails lets go of its hold
 * (ReleaseDepartmentHold); a hold whose writer died before that is only a refusal
 * too many, purged after a day (STALE_HOLD_HOURS).
 */

const uuid = z.string().refine(isUuid, 'must be a UUID');
const holdRequest = z.object({ org_id: uuid, department_id: uuid, resource: z.string().regex(/^[a-z][a-z0-9_/-]{0,63}$/), hold_id: uuid });
const releaseRequest = z.object({ hold_id: uuid });
const changeRequest = z.object({
  event_id: uuid,
  org_id: uuid,
  resource: z.string().regex(/^[a-z][a-z0-9_/-]{0,63}$/),
  from: uuid.optional(),
  to: uuid.optional(),
  hold_id: uuid.optional(),
});

/** What a record service's committed write did to the department its record names. */
const changeData = z.object({
  resource: z.string().regex(/^[a-z][a-z0-9_/-]{0,63}$/),
  from: uuid.nullable(),
  to: uuid.nullable(),
  hold_id: uuid.nullable(),
  /** records at once: the one-off count of the records written before this rule (the record services' migrations) */
  n: z.number().int().min(1).max(1_000_000_000).optional(),
});

/** Hours after which a hold no write counted is taken for one whose writer died (decision 056). */
const STALE_HOLD_HOURS = 24;

/** A peer acts in its caller's organisation; the operator and the platform in any. */
function assertSameOrg(caller: CallerContext, orgId: string): void {
  if (caller.token_kind === 'operator' || caller.token_kind === 'system') return;
  if (caller.org_id?.toLowerCase() !== orgId.toLowerCase()) throw DomainError.notFound('department not found');
}

async function holdDepartment(deps: Pick<ServiceDeps, 'db'>, caller: CallerContext, input: z.infer<typeof holdRequest>): Promise<void> {
  assertSameOrg(caller, input.org_id);
  await deps.db.tx(async (tx) => {
    // the department row held (FOR KEY SHARE) to the commit: a deletion under way
    // is waited for, and once it has committed the row is not found
    const [dept] = await rows<{ id: string }>(
      tx,
      sql`select id from identity.departments where org_id = ${input.org_id}::uuid and id = ${input.department_id}::uuid for key share`,
    );
    if (!dept) throw DomainError.notFound('department not found');
    // a retry of the same hold finds it there
    await tx.execute(sql`insert into identity.department_holds (id, org_id, department_id, resource)
      values (${input.hold_id}::uuid, ${input.org_id}::uuid, ${input.department_id}::uuid, ${input.resource})
      on conflict (id) do nothing`);
  });
}

async function releaseDepartmentHold(deps: Pick<ServiceDeps, 'db'>, holdId: string): Promise<void> {
  await deps.db.rows(sql`delete from identity.department_holds where id = ${holdId}::uuid`);
}

/** Adds `by` to the count of one department and resource; nothing for a department that is gone. */
async function count(tx: Tx, orgId: string, departmentId: string, resource: string, by: number): Promise<void> {
  const [dept] = await rows<{ id: string }>(
    tx,
    sql`select id from identity.departments where org_id = ${orgId}::uuid and id = ${departmentId}::uuid for key share`,
  );
  if (!dept) return;
  await tx.execute(sql`insert into identity.department_refs (org_id, department_id, resource, n)
    values (${orgId}::uuid, ${departmentId}::uuid, ${resource}, ${by}::int)
    on conflict (org_id, department_id, resource) do update set n = identity.department_refs.n + excluded.n`);
}

/** Counts one committed write's department_ref.changed and lets go of its hold. */
async function countReferenceChange(tx: Tx, msg: BusMessage): Promise<void> {
  const parsed = changeData.safeParse(msg.data);
  // an event of another shape is no count of ours: it is left alone rather than parked forever
  if (!parsed.success || !msg.org_id) return;
  const { resource, from, to, hold_id, n = 1 } = parsed.data;
  if (hold_id) await tx.execute(sql`delete from identity.department_holds where id = ${hold_id}::uuid`);
  if (from === to) return;
  if (from) await count(tx, msg.org_id, from, resource, -n);
  if (to) await count(tx, msg.org_id, to, resource, n);
}

/**
 * What names a department (its row locked FOR UPDATE by the caller): the records
 * counted and the writes under way (their holds), per resource. A write under
 * way is taken for the record it is about to be.
 */
export async function recordsNaming(tx: Tx, orgId: string, departmentId: string): Promise<Record<string, number>> {
  const found = await rows<{ resource: string; n: number }>(
    tx,
    sql`select resource, sum(n)::int as n from (
          select resource, n from identity.department_refs where org_id = ${orgId}::uuid and department_id = ${departmentId}::uuid
          union all
          select resource, count(*)::int from identity.department_holds where org_id = ${orgId}::uuid and department_id = ${departmentId}::uuid group by resource
        ) c group by resource having sum(n) > 0 order by resource`,
  );
  return Object.fromEntries(found.map((r) => [r.resource, r.n]));
}

/**
 * Counts a committed write's change when its service says so right after the
 * commit, under the event's id in the inbox: the event, when it comes, finds the
 * id there and is not counted again (and if this call never came, the event
 * counts it).
 */
async function countReferenceChangeNow(deps: Pick<ServiceDeps, 'db'>, caller: CallerContext, input: z.infer<typeof changeRequest>): Promise<void> {
  assertSameOrg(caller, input.org_id);
  await deps.db.tx(async (tx) => {
    const fresh = await rows<{ id: string }>(tx, sql`insert into identity.inbox (id) values (${input.event_id}::uuid) on conflict do nothing returning id`);
    if (!fresh.length) return;
    await countReferenceChange(tx, {
      id: input.event_id,
      type: 'department_ref.changed',
      org_id: input.org_id,
      occurred_at: new Date().toISOString(),
      data: { resource: input.resource, from: input.from ?? null, to: input.to ?? null, hold_id: input.hold_id ?? null },
    });
  });
}

/** Consumes the record services' department_ref.changed events, each counted once (inbox). */
export async function consumeReferenceChanges(deps: ServiceDeps): Promise<void> {
  await consumeWithInbox({
    bus: deps.bus,
    db: deps.db,
    schema: 'identity',
    ...EVENT_ROUTES.departmentReferences,
    handler: (tx, msg) => countReferenceChange(tx, msg),
  });
}

/** Holds older than STALE_HOLD_HOURS: their writers died between the hold and the write's end. */
export const purgeStaleHolds = (db: Database): Promise<number> =>
  deleteInBatches(db, 'identity.department_holds', sql`created_at < now() - (${STALE_HOLD_HOURS} * interval '1 hour')`);

export function registerDepartmentReferences(server: GrpcServer, deps: ServiceDeps): void {
  server.add(departmentReferences.DepartmentReferenceServiceService, {
    holdDepartment: async (req, caller) => {
      await holdDepartment(deps, caller, parse(holdRequest, req));
      return {};
    },
    releaseDepartmentHold: async (req) => {
      await releaseDepartmentHold(deps, parse(releaseRequest, req).hold_id);
      return {};
    },
    countReferenceChange: async (req, caller) => {
      await countReferenceChangeNow(deps, caller, parse(changeRequest, req));
      return {};
    },
  });
}
