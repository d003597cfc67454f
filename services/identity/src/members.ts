import { sql } from 'drizzle-orm';
import { DomainError, type CallerContext, type Executor, type ServiceDeps, sqlArray } from '@lab/kit';
import type { identity } from '@lab/contracts';
import { ACTIONS, roleMay } from '@lab/permissions';
import type { Role } from './model.js';
import { requireOrg } from './orgs.js';
import { endGrantsOfMember } from './revocation.js';
import { iso } from './sql.js';

type Member = identity.Member;

interface MemberRow {
  org_id: string;
  user_id: string;
  role: string;
  department_id: string | null;
  email: string;
  name: string | null;
  created_at: string;
}

const toMember = (r: MemberRow): Member => ({
  org_id: r.org_id,
  user_id: r.user_id,
  role: r.role,
  ...(r.department_id !== null ? { department_id: r.department_id } : {}),
  email: r.email,
  ...(r.name !== null ? { name: r.name } : {}),
  created_at: r.created_at,
});

/** Audit view: the membership itself, without the user's contact data. */
const snapshot = (m: Member) => ({ org_id: m.org_id, user_id: m.user_id, role: m.role, department_id: m.department_id ?? null });

const selectMembers = sql`select m.org_id, m.user_id, m.role, m.department_id, u.email, u.name, ${iso(sql`m.created_at`)} as created_at
  from identity.memberships m join identity.users u on u.id = m.user_id`;

export async function findMember(deps: ServiceDeps, orgId: string, userId: string, exec?: Executor, lock = false): Promise<Member | null> {
  const [row] = await deps.db.rows<MemberRow>(
    sql`${selectMembers} where m.org_id = ${orgId} and m.user_id = ${userId} ${lock ? sql`for update of m` : sql``}`,
    exec,
  );
  return row ? toMember(row) : null;
}

/** Throws 400 unless the user is a member of the org (for tokens that act as a member). */
export async function requireMember(deps: ServiceDeps, orgId: string, userId: string, exec: Executor): Promise<void> {
  if (!(await findMember(deps, orgId, userId, exec))) {
    throw DomainError.invalid('the user is not a member of the organisation', { user_id: userId, org_id: orgId }, 'not_a_member');
  }
}

/**
 * Whether a member moved from role `from` to `to` loses anything `from` may do
 * (the roles are not a ladder: dept_admin and researcher each may something the
 * other may not, so either move is a loss).
 */
const roleLowered = (from: string, to: string) => ACTIONS.some((a) => roleMay(from, a) && !roleMay(to, a));

export async function putMember(
  deps: ServiceDeps,
  caller: CallerContext,
  input: { org_id: string; user_id: string; role: Role; department_id?: string },
): Promise<Member> {
  return deps.outbox.write(caller, async (tx, emit) => {
    await requireOrg(deps, input.org_id, tx);
    const [user] = await deps.db.rows<{ id: string }>(sql`select id from identity.users where id = ${input.user_id}`, tx);
    if (!user) throw DomainError.notFound('user not found');
    if (input.department_id) {
      // key share: a department being deleted is waited for and then not found
      // (400), rather than found here and gone at the insert (a foreign key error)
      const [dept] = await deps.db.rows<{ id: string }>(
        sql`select id from identity.departments where id = ${input.department_id} and org_id = ${input.org_id} for key share`,
        tx,
      );
      if (!dept) throw DomainError.invalid('department not found in this organisation', { department_id: input.department_id });
    }
    const before = await findMember(deps, input.org_id, input.user_id, tx, true);
    await tx.execute(sql`insert into identity.memberships (org_id, user_id, role, department_id)
        values (${input.org_id}, ${input.user_id}, ${input.role}, ${input.department_id ?? null})
        on conflict (org_id, user_id) do update
          set role = excluded.role, department_id = excluded.department_id, updated_at = now()`);
    const after = (await findMember(deps, input.org_id, input.user_id, tx))!;
    // consent given in the old role asked for more than the new one holds: it ends with the change
    if (before && roleLowered(before.role, after.role)) await endGrantsOfMember(tx, emit, input.org_id, input.user_id, 'role_lowered');
    emit.audit(input.org_id, {
      action: before ? 'update' : 'create',
      resource: 'member',
      record_id: input.user_id,
      before: before ? snapshot(before) : null,
      after: snapshot(after),
    });
    emit.event('identity.member.changed', input.org_id, { org_id: input.org_id, user_id: input.user_id });
    return after;
  });
}

export async function deleteMember(deps: ServiceDeps, caller: CallerContext, input: { org_id: string; user_id: string }): Promise<void> {
  await deps.outbox.write(caller, async (tx, emit) => {
    const before = await findMember(deps, input.org_id, input.user_id, tx, true);
    if (!before) throw DomainError.notFound('member not found');
    await tx.execute(sql`delete from identity.memberships where org_id = ${input.org_id} and user_id = ${input.user_id}`);
    // a grant was consent given as a member: it ends here, not when (and if) the member comes back
    await endGrantsOfMember(tx, emit, input.org_id, input.user_id, 'member_removed');
    emit.audit(input.org_id, { action: 'delete', resource: 'member', record_id: input.user_id, before: snapshot(before) });
    emit.event('identity.member.removed', input.org_id, { org_id: input.org_id, user_id: input.user_id });
  });
}

/** Members of one org: only the given users (non-members left out), or by role, or all. */
export async function listMembers(deps: ServiceDeps, input: { org_id: string; user_ids: string[]; role?: Role }): Promise<Member[]> {
  const filters = [sql`m.org_id = ${input.org_id}`];
  if (input.user_ids.length) filters.push(sql`m.user_id = any(${sqlArray(input.user_ids)}::uuid[])`);
  if (input.role) filters.push(sql`m.role = ${input.role}`);
  const rows = await deps.db.rows<MemberRow>(sql`${selectMembers} where ${sql.join(filters, sql` and `)} order by m.created_at, m.user_id`);
  return rows.map(toMember);
}

/** Organisations a user belongs to, with the role there (the OAuth consent page's picker). */
export async function listUserOrgs(deps: ServiceDeps, userId: string): Promise<identity.UserOrg[]> {
  return deps.db.rows<identity.UserOrg>(
    sql`select m.org_id, o.name, m.role from identity.memberships m join identity.orgs o on o.id = m.org_id
        where m.user_id = ${userId} order by o.name, m.org_id limit 500`,
  );
}
