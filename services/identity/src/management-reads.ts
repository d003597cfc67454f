import { sql, type SQL } from 'drizzle-orm';
import { DomainError, sqlArray, type ServiceDeps } from '@lab/kit';
import type { identity } from '@lab/contracts';
import { toClient, type ClientRow } from './oauth-clients.js';
import { iso } from './sql.js';

/**
 * What the management API reads back of what it made: organisations,
 * departments, users with their memberships, members, tokens and OAuth clients.
 * Each list is one page (limit, offset) with its total, in creation order with
 * the id as tie-break, so pages neither repeat nor skip rows between two reads.
 * Token hashes and client secret hashes are never selected.
 */
export interface PageIn {
  limit: number;
  offset: number;
}

const pageOut = (p: PageIn, total: number): identity.Page => ({ limit: p.limit, offset: p.offset, total });

/** One page of rows and the count of all rows of a `from ... where ...` clause. */
// eslint-disable-next-line @typescript-eslint/no-unnecessary-type-parameters -- the caller names the row type its select gives
async function page<T>(deps: ServiceDeps, select: SQL, from: SQL, order: SQL, p: PageIn): Promise<{ rows: T[]; page: identity.Page }> {
  const [list, count] = await Promise.all([
    deps.db.rows<T>(sql`select ${select} ${from} order by ${order} limit ${p.limit} offset ${p.offset}`),
    deps.db.rows<{ n: number }>(sql`select count(*)::int as n ${from}`),
  ]);
  return { rows: list, page: pageOut(p, count[0]?.n ?? 0) };
}

async function requireOrgExists(deps: ServiceDeps, orgId: string): Promise<void> {
  const [row] = await deps.db.rows<{ id: string }>(sql`select id from identity.orgs where id = ${orgId}`);
  if (!row) throw DomainError.notFound('organisation not found');
}

export async function listOrgs(deps: ServiceDeps, p: PageIn): Promise<identity.ListOrgsResponse> {
  const r = await page<{ id: string; name: string; modules: string[]; per_minute: number; per_hour: number; created_at: string }>(
    deps,
    sql`id, name, modules, rate_per_minute as per_minute, rate_per_hour as per_hour, ${iso(sql`created_at`)} as created_at`,
    sql`from identity.orgs`,
    sql`created_at, id`,
    p,
  );
  return {
    orgs: r.rows.map((o) => ({
      id: o.id,
      name: o.name,
      modules: o.modules,
      rate_limit: { per_minute: o.per_minute, per_hour: o.per_hour },
      created_at: o.created_at,
    })),
    page: r.page,
  };
}

/**
 * The organisation's departments; with `ids`, only those among them (a service
 * checking a reference: one indexed lookup by primary key, still org-scoped).
 */
export async function listDepartments(deps: ServiceDeps, orgId: string, p: PageIn, ids: string[] = []): Promise<identity.ListDepartmentsResponse> {
  await requireOrgExists(deps, orgId);
  const only = ids.length ? sql` and id = any(${sqlArray(ids)}::uuid[])` : sql``;
  const r = await page<identity.Department>(
    deps,
    sql`id, org_id, name, ${iso(sql`created_at`)} as created_at`,
    sql`from identity.departments where org_id = ${orgId}${only}`,
    sql`created_at, id`,
    p,
  );
  return { departments: r.rows, page: r.page };
}

interface MembershipRow {
  user_id: string;
  org_id: string;
  org_name: string;
  role: string;
  department_id: string | null;
}

/** The memberships of the given users, by user. */
async function membershipsOf(deps: ServiceDeps, userIds: string[]): Promise<Map<string, identity.Membership[]>> {
  const out = new Map<string, identity.Membership[]>();
  if (!userIds.length) return out;
  const rows = await deps.db.rows<MembershipRow>(
    sql`select m.user_id, m.org_id, o.name as org_name, m.role, m.department_id
        from identity.memberships m join identity.orgs o on o.id = m.org_id
        where m.user_id in (${sql.join(
          userIds.map((id) => sql`${id}::uuid`),
          sql`, `,
        )})
        order by m.created_at, m.org_id`,
  );
  for (const r of rows) {
    const list = out.get(r.user_id) ?? [];
    list.push({ org_id: r.org_id, org_name: r.org_name, role: r.role, ...(r.department_id ? { department_id: r.department_id } : {}) });
    out.set(r.user_id, list);
  }
  return out;
}

interface UserRow {
  id: string;
  email: string;
  name: string | null;
  created_at: string;
}

const USER_COLUMNS = sql`id, email, name, ${iso(sql`created_at`)} as created_at`;

async function withMemberships(deps: ServiceDeps, users: UserRow[]): Promise<identity.UserWithMemberships[]> {
  const m = await membershipsOf(
    deps,
    users.map((u) => u.id),
  );
  return users.map((u) => ({
    id: u.id,
    email: u.email,
    ...(u.name !== null ? { name: u.name } : {}),
    created_at: u.created_at,
    memberships: m.get(u.id) ?? [],
  }));
}

/** Users (only the one of `email`, compared case-insensitively, when given) with their memberships. */
export async function listUsers(deps: ServiceDeps, email: string | undefined, p: PageIn): Promise<identity.ListUsersResponse> {
  const where = email === undefined ? sql`` : sql`where lower(email) = lower(${email})`;
  const r = await page<UserRow>(deps, USER_COLUMNS, sql`from identity.users ${where}`, sql`created_at, id`, p);
  return { users: await withMemberships(deps, r.rows), page: r.page };
}

export async function getUserMemberships(deps: ServiceDeps, userId: string): Promise<identity.UserWithMemberships> {
  const [u] = await deps.db.rows<UserRow>(sql`select ${USER_COLUMNS} from identity.users where id = ${userId}`);
  if (!u) throw DomainError.notFound('user not found');
  return (await withMemberships(deps, [u]))[0]!;
}

export async function listMembersPage(deps: ServiceDeps, orgId: string, p: PageIn): Promise<identity.ListMembersPageResponse> {
  await requireOrgExists(deps, orgId);
  const r = await page<{ org_id: string; user_id: string; role: string; department_id: string | null; email: string; name: string | null; created_at: string }>(
    deps,
    sql`m.org_id, m.user_id, m.role, m.department_id, u.email, u.name, ${iso(sql`m.created_at`)} as created_at`,
    sql`from identity.memberships m join identity.users u on u.id = m.user_id where m.org_id = ${orgId}`,
    sql`m.created_at, m.user_id`,
    p,
  );
  return {
    members: r.rows.map((m) => ({
      org_id: m.org_id,
      user_id: m.user_id,
      role: m.role,
      ...(m.department_id !== null ? { department_id: m.department_id } : {}),
      email: m.email,
      ...(m.name !== null ? { name: m.name } : {}),
      created_at: m.created_at,
    })),
    page: r.page,
  };
}

interface TokenRow {
  id: string;
  kind: string;
  name: string | null;
  prefix: string | null;
  scopes: string[];
  org_id: string | null;
  user_id: string | null;
  connector_id: string | null;
  device_ids: string[];
  created_at: string;
  last_used_at: string | null;
  expires_at: string | null;
}

/** Live API keys of an organisation, or live personal access tokens of a user: never the token or its hash. */
export async function listTokens(
  deps: ServiceDeps,
  input: { kind: 'api_key' | 'pat'; org_id?: string; user_id?: string },
  p: PageIn,
): Promise<identity.ListTokensResponse> {
  let owner: SQL;
  if (input.kind === 'api_key') {
    await requireOrgExists(deps, input.org_id!);
    owner = sql`org_id = ${input.org_id!}`;
  } else {
    const [u] = await deps.db.rows<{ id: string }>(sql`select id from identity.users where id = ${input.user_id!}`);
    if (!u) throw DomainError.notFound('user not found');
    owner = sql`user_id = ${input.user_id!}`;
  }
  const r = await page<TokenRow>(
    deps,
    sql`id, kind, name, display_prefix as prefix, scopes, org_id, user_id, connector_id, device_ids,
        ${iso(sql`created_at`)} as created_at, ${iso(sql`last_used_at`)} as last_used_at, ${iso(sql`expires_at`)} as expires_at`,
    sql`from identity.tokens where kind = ${input.kind} and ${owner} and revoked_at is null and (expires_at is null or expires_at > now())`,
    sql`created_at, id`,
    p,
  );
  const opt = (k: string, v: string | null) => (v !== null ? { [k]: v } : {});
  return {
    tokens: r.rows.map((t) => ({
      id: t.id,
      kind: t.kind,
      ...opt('name', t.name),
      ...opt('prefix', t.prefix),
      scopes: t.scopes,
      ...opt('org_id', t.org_id),
      ...opt('user_id', t.user_id),
      ...opt('connector_id', t.connector_id),
      device_ids: t.device_ids,
      created_at: t.created_at,
      ...opt('last_used_at', t.last_used_at),
      ...opt('expires_at', t.expires_at),
    })),
    page: r.page,
  };
}

export async function listOAuthClients(deps: ServiceDeps, p: PageIn): Promise<identity.ListOAuthClientsResponse> {
  const r = await page<Omit<ClientRow, 'secret_hash'>>(
    deps,
    sql`id, name, redirect_uris, scopes, ${iso(sql`created_at`)} as created_at, public, metadata_url`,
    sql`from identity.oauth_clients where deleted_at is null`,
    sql`created_at, id`,
    p,
  );
  return { clients: r.rows.map(toClient), page: r.page };
}
