import { hasAdminScope } from './scopes.js';

/**
 * THE permission model of the organisation: which role may do what, written
 * once. Every service and the gateway ask it (`may`, `assertMay`, the record
 * rules in records.ts) instead of comparing role names themselves, so a role
 * means the same everywhere. Scopes of a token are checked before (scopes.ts):
 * they never replace these rules.
 */

/** The roles a member holds in an organisation (identity stores one per membership). */
export const ROLES = ['admin', 'dept_admin', 'researcher', 'qm', 'viewer'] as const;
export type Role = (typeof ROLES)[number];

/**
 * What a caller may do. The write_* actions are the reach of a writer among the
 * records that carry a department and an owner (records.ts): a role that may
 * `write` changes the records one of its write_* actions reaches.
 */
export const ACTIONS = [
  /** read the records its read reach shows (records.ts) */
  'read',
  /** see every record of the organisation, whatever its department or owner */
  'read_all_departments',
  /** create and change records at all (what `write` is refused, no record is written) */
  'write',
  /** change every record of the organisation */
  'write_any_record',
  /** change records of the caller's own department */
  'write_department_records',
  /** change records that belong to no department */
  'write_unassigned_records',
  /** change records the caller owns (authored, leads, registered) */
  'write_own_records',
  /** delete records (generic records, devices, connectors, test-mode deletes) */
  'delete',
  /** sign experiments (the signing rules of the notebook apply beside) */
  'sign',
  /** release lab results: a quality decision */
  'release_result',
  /** administer the organisation: administrators' job types, all jobs, admin-only OAuth scopes */
  'administer',
] as const;
export type Action = (typeof ACTIONS)[number];

/** The one table: role -> the actions it may take. */
export const ROLE_ACTIONS: Readonly<Record<Role, readonly Action[]>> = {
  admin: ACTIONS,
  dept_admin: ['read', 'write', 'write_department_records', 'write_unassigned_records', 'sign'],
  researcher: ['read', 'write', 'write_department_records', 'write_own_records', 'sign'],
  qm: ['read', 'read_all_departments', 'write', 'write_department_records', 'write_own_records', 'sign', 'release_result'],
  viewer: ['read'],
};

/**
 * A token without a user (an API key not bound to one) has no role: its scopes
 * decide. It reads and writes what its scopes allow (the gateway checked them);
 * the administrators' actions need the admin scope (or `*`); it never signs
 * (a signature is a person's).
 */
export const WITHOUT_USER: Readonly<Record<Action, 'always' | 'admin_scope' | 'never'>> = {
  read: 'always',
  read_all_departments: 'always',
  write: 'always',
  write_any_record: 'always',
  write_department_records: 'always',
  write_unassigned_records: 'always',
  write_own_records: 'always',
  delete: 'admin_scope',
  sign: 'never',
  release_result: 'admin_scope',
  administer: 'admin_scope',
};

/**
 * Who is asking, as far as permissions go: the user and their role and
 * department in the organisation, or no user and the token's scopes.
 * CallerContext (kit) and the gateway's Principal both fit.
 */
export interface Caller {
  user_id?: string | null;
  role?: string | null;
  department_id?: string | null;
  scopes: readonly string[];
}

const TABLE = new Map<string, ReadonlySet<Action>>(ROLES.map((r) => [r, new Set(ROLE_ACTIONS[r])]));

export const isRole = (role: unknown): role is Role => typeof role === 'string' && TABLE.has(role);

/** Whether a member holding `role` may take `action` (an unknown role may nothing). */
export function roleMay(role: string | null | undefined, action: Action): boolean {
  return (role != null && TABLE.get(role)?.has(action)) ?? false;
}

/** Whether the caller may take `action`: by its role, or for a token without a user by its scopes. */
export function may(caller: Caller, action: Action): boolean {
  if (caller.user_id) return roleMay(caller.role, action);
  const rule = WITHOUT_USER[action];
  return rule === 'always' || (rule === 'admin_scope' && hasAdminScope(caller.scopes));
}

/** The roles that may take `action`, in the table's order (named in denials). */
export const rolesThatMay = (action: Action): Role[] => ROLES.filter((r) => roleMay(r, action));

/**
 * Whether the caller administers its organisation: a user whose role is
 * admin, or a token without a user that holds the admin scope or `*`.
 */
export const isAdministrator = (caller: Caller): boolean => may(caller, 'administer');
