import { sql } from 'drizzle-orm';
import { DomainError, newId, type CallerContext, type Executor, type ServiceDeps, sqlArray } from '@lab/kit';
import type { identity } from '@lab/contracts';
import { recordsNaming } from './department-references.js';
import { DEFAULT_RATE_LIMIT, type Module } from './model.js';
import { iso } from './sql.js';

type Org = identity.Org;
interface RateLimit {
  per_minute: number;
  per_hour: number;
}

interface OrgRow {
  id: string;
  name: string;
  modules: string[];
  per_minute: number;
  per_hour: number;
  created_at: string;
}

const toOrg = (r: OrgRow): Org => ({
  id: r.id,
  name: r.name,
  modules: r.modules,
  rate_limit: { per_minute: r.per_minute, per_hour: r.per_hour },
  created_at: r.created_at,
});

/** Audit/event view of an org (the wire shape without its timestamp). */
const snapshot = (o: Org) => ({ id: o.id, name: o.name, modules: o.modules, rate_limit: o.rate_limit });

async function findOrg(deps: ServiceDeps, orgId: string, exec?: Executor, lock = false): Promise<Org | null> {
  const [row] = await deps.db.rows<OrgRow>(
    sql`select id, name, modules, rate_per_minute as per_minute, rate_per_hour as per_hour,
               ${iso(sql`created_at`)} as created_at
        from identity.orgs where id = ${orgId} ${lock ? sql`for update` : sql``}`,
    exec,
  );
  return row ? toOrg(row) : null;
}

export async function getOrg(deps: ServiceDeps, orgId: string, exec?: Executor): Promise<Org> {
  const org = await findOrg(deps, orgId, exec);
  if (!org) throw DomainError.notFound('organisation not found');
  return org;
}

/** Throws 404 unless the org exists; for writes that hang off an org. */
export async function requireOrg(deps: ServiceDeps, orgId: string, exec: Executor): Promise<void> {
  const [row] = await deps.db.rows<{ id: string }>(sql`select id from identity.orgs where id = ${orgId}`, exec);
  if (!row) throw DomainError.notFound('organisation not found');
}

export async function createOrg(deps: ServiceDeps, caller: CallerContext, input: { name: string; modules: Module[]; rate_limit?: RateLimit }): Promise<Org> {
  const id = newId();
  const limit = input.rate_limit ?? DEFAULT_RATE_LIMIT;
  return deps.outbox.write(caller, async (tx, emit) => {
    await tx.execute(sql`insert into identity.orgs (id, name, modules, rate_per_minute, rate_per_hour)
      values (${id}, ${input.name}, ${sqlArray(input.modules)}::text[], ${limit.per_minute}, ${limit.per_hour})`);
    const org = await getOrg(deps, id, tx);
    emit.audit(id, { action: 'create', resource: 'org', record_id: id, after: snapshot(org) });
    return org;
  });
}

export async function updateOrg(
  deps: ServiceDeps,
  caller: CallerContext,
  input: { org_id: string; name?: string; modules?: { modules: Module[] }; rate_limit?: RateLimit },
): Promise<Org> {
  return deps.outbox.write(caller, async (tx, emit) => {
    const before = await findOrg(deps, input.org_id, tx, true);
    if (!before) throw DomainError.notFound('organisation not found');
    const name = input.name ?? before.name;
    const modules = input.modules ? input.modules.modules : before.modules;
    const limit = input.rate_limit ?? before.rate_limit!;
    await tx.execute(sql`update identity.orgs set name = ${name}, modules = ${sqlArray(modules)}::text[],
        rate_per_minute = ${limit.per_minute}, rate_per_hour = ${limit.per_hour}, updated_at = now()
      where id = ${input.org_id}`);
    const after = await getOrg(deps, input.org_id, tx);
    emit.audit(after.id, { action: 'update', resource: 'org', record_id: after.id, before: snapshot(before), after: snapshot(after) });
    emit.event('identity.org.updated', after.id, { org_id: after.id });
    return after;
  });
}

export async function createDepartment(deps: ServiceDeps, caller: CallerContext, input: { org_id: string; name: string }): Promise<identity.Department> {
  const id = newId();
  return deps.outbox.write(caller, async (tx, emit) => {
    await requireOrg(deps, input.org_id, tx);
    const [row] = await deps.db.rows<{ created_at: string }>(
      sql`insert into identity.departments (id, org_id, name) values (${id}, ${input.org_id}, ${input.name})
          returning ${iso(sql`created_at`)} as created_at`,
      tx,
    );
    const dept = { id, org_id: input.org_id, name: input.name };
    emit.audit(input.org_id, { action: 'create', resource: 'department', record_id: id, after: dept });
    return { ...dept, created_at: row!.created_at };
  });
}

/**
 * Deletes a department that no member belongs to and no record names (409
 * department_in_use otherwise, with how many do). The records are other
 * services': identity knows them by their holds and counts
 * (department-references.ts, decision 056). The row is locked first, so a member
 * put into it or a write holding it meanwhile waits and then finds it gone, rather
 * than pointing nowhere.
 */
export async function deleteDepartment(deps: ServiceDeps, caller: CallerContext, input: { org_id: string; department_id: string }): Promise<void> {
  await deps.outbox.write(caller, async (tx, emit) => {
    const [dept] = await deps.db.rows<{ id: string; name: string }>(
      sql`select id, name from identity.departments where org_id = ${input.org_id} and id = ${input.department_id} for update`,
      tx,
    );
    if (!dept) throw DomainError.notFound('department not found');
    const [{ n }] = (await deps.db.rows<{ n: number }>(
      sql`select count(*)::int as n from identity.memberships where org_id = ${input.org_id} and department_id = ${input.department_id}`,
      tx,
    )) as [{ n: number }];
    if (n > 0) {
      throw DomainError.conflict(`the department has ${n} member${n === 1 ? '' : 's'}; move or remove them first`, 'department_in_use', { members: n });
    }
    const records = await recordsNaming(tx, input.org_id, input.department_id);
    if (Object.keys(records).length) {
      const named = Object.entries(records)
        .map(([k, c]) => `${c} ${k}`)
        .join(', ');
      throw DomainError.conflict(`the department is named by records (${named}); change them first`, 'department_in_use', { records });
    }
    await tx.execute(sql`delete from identity.departments where org_id = ${input.org_id} and id = ${input.department_id}`);
    emit.audit(input.org_id, { action: 'delete', resource: 'department', record_id: dept.id, before: { id: dept.id, org_id: input.org_id, name: dept.name } });
  });
}
