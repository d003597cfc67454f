import { DomainError } from '@lab/kit';
import {
  ACTIONS,
  ROLES,
  assertMay,
  assertMayWriteRecord,
  denial,
  grantsScope,
  isAdministrator,
  may,
  mayWriteRecord,
  readReach,
  roleMay,
  type Action,
  type Caller,
} from '../src';

const USER = '0190f5a0-0000-7000-8000-000000000001';
const OTHER = '0190f5a0-0000-7000-8000-000000000002';
const DEPT = '0190f5a0-0000-7000-8000-0000000000d1';
const DEPT2 = '0190f5a0-0000-7000-8000-0000000000d2';

/**
 * The expected table, written out by hand (not derived from the code's): a
 * change of the model must change this line by line.
 */
const EXPECTED: Record<string, Record<Action, boolean>> = {
  //          read  all   write any   dept  unas  own   del   sign  rel   adm
  admin: row([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]),
  dept_admin: row([1, 0, 1, 0, 1, 1, 0, 0, 1, 0, 0]),
  researcher: row([1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 0]),
  qm: row([1, 1, 1, 0, 1, 0, 1, 0, 1, 1, 0]),
  viewer: row([1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
  // a user whose role the model does not know may nothing
  intern: row([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
  // a token without a user: by its scopes
  'no user, read write': row([1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0]),
  'no user, admin': row([1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1]),
  'no user, *': row([1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1]),
};

function row(bits: number[]): Record<Action, boolean> {
  // the columns above, in this order
  const order: Action[] = [
    'read',
    'read_all_departments',
    'write',
    'write_any_record',
    'write_department_records',
    'write_unassigned_records',
    'write_own_records',
    'delete',
    'sign',
    'release_result',
    'administer',
  ];
  return Object.fromEntries(order.map((a, i) => [a, bits[i] === 1])) as Record<Action, boolean>;
}

const CALLERS: Record<string, Caller> = {
  ...Object.fromEntries([...ROLES, 'intern'].map((role) => [role, { user_id: USER, role, department_id: DEPT, scopes: ['*'] }])),
  'no user, read write': { user_id: null, role: null, scopes: ['read', 'write'] },
  'no user, admin': { user_id: null, role: null, scopes: ['read', 'admin'] },
  'no user, *': { scopes: ['*'] },
};

describe('the permission table', () => {
  it('names every action in the expected table', () => {
    expect(Object.keys(EXPECTED.admin!).sort()).toEqual([...ACTIONS].sort());
    expect(Object.keys(CALLERS).sort()).toEqual(Object.keys(EXPECTED).sort());
  });

  const cases = Object.entries(EXPECTED).flatMap(([who, actions]) => ACTIONS.map((a) => [who, a, actions[a]] as const));
  it.each(cases)('%s may %s: %s', (who, action, expected) => {
    const caller = CALLERS[who]!;
    expect(may(caller, action)).toBe(expected);
    if (caller.user_id) expect(roleMay(caller.role, action)).toBe(expected);
    if (expected) expect(() => assertMay(caller, action)).not.toThrow();
    else expect(() => assertMay(caller, action)).toThrow(DomainError);
  });

  it('gives a user its role only: a user holding the * scope is no administrator', () => {
    expect(isAdministrator({ user_id: USER, role: 'researcher', scopes: ['*'] })).toBe(false);
    expect(isAdministrator({ user_id: USER, role: 'admin', scopes: ['read'] })).toBe(true);
    expect(isAdministrator({ user_id: null, role: null, scopes: ['write'] })).toBe(false);
    expect(isAdministrator({ scopes: ['read'] })).toBe(false);
  });
});

describe('grantsScope', () => {
  it.each([
    [['read'], 'read', true],
    [['write'], 'read', true],
    [['read'], 'write', false],
    [['admin'], 'audit:read', true],
    [['*'], 'devices:register', true],
    [['write'], 'audit:read', false],
    [['devices:register'], 'read', false],
    [[], 'read', false],
  ])('%j grants %s: %s', (granted, required, expected) => {
    expect(grantsScope(granted, required)).toBe(expected);
  });
});

describe('the department and ownership rule', () => {
  const caller = (over: Partial<Caller>): Caller => ({ user_id: USER, role: 'researcher', department_id: DEPT, scopes: ['read', 'write'], ...over });
  const owners = { owners: ['author_id', 'created_by'] };

  it('lets admin, qm and tokens without a user see every record, others their reach', () => {
    expect(readReach(caller({ role: 'admin' }))).toEqual({ all: true });
    expect(readReach(caller({ role: 'qm' }))).toEqual({ all: true });
    expect(readReach(caller({ user_id: null, role: null }))).toEqual({ all: true });
    for (const role of ['dept_admin', 'researcher', 'viewer']) {
      expect(readReach(caller({ role }))).toEqual({ all: false, department_id: DEPT, user_id: USER });
    }
    expect(readReach(caller({ role: 'viewer', department_id: null }))).toEqual({ all: false, department_id: null, user_id: USER });
  });

  const unassigned = { department_id: null };
  const ownDept = { department_id: DEPT };
  const otherDept = { department_id: DEPT2 };
  const ownedElsewhere = { department_id: DEPT2, author_id: USER };
  const ownedUnassigned = { created_by: USER };
  const othersUnassigned = { created_by: OTHER };
  it.each([
    ['admin', otherDept, true, true],
    ['dept_admin', unassigned, true, true],
    ['dept_admin', ownDept, true, true],
    ['dept_admin', otherDept, false, false],
    ['dept_admin', ownedElsewhere, false, false],
    ['researcher', ownedElsewhere, true, true],
    ['researcher', ownDept, true, true],
    ['researcher', unassigned, false, true],
    ['researcher', ownedUnassigned, true, true],
    ['researcher', othersUnassigned, false, true],
    ['researcher', otherDept, false, false],
    ['qm', { department_id: DEPT2, created_by: USER }, true, true],
    ['qm', otherDept, false, false],
    ['qm', unassigned, false, true],
    ['viewer', { department_id: DEPT, author_id: USER }, false, false],
    ['viewer', unassigned, false, false],
  ])('%s may write %p: %s (unassigned shared: %s)', (role, record, expected, shared) => {
    expect(mayWriteRecord(caller({ role }), record, owners)).toBe(expected);
    expect(mayWriteRecord(caller({ role }), record, { ...owners, unassignedShared: true })).toBe(shared);
  });

  it('lets a token without a user write every record', () => {
    expect(mayWriteRecord(caller({ user_id: null, role: null }), otherDept, owners)).toBe(true);
  });

  it('refuses a viewer as a viewer and any other writer for the record', () => {
    expect(() => assertMayWriteRecord(caller({ role: 'viewer' }), unassigned, owners, 'sample')).toThrow('the viewer role cannot change records');
    expect(() => assertMayWriteRecord(caller({}), otherDept, owners, 'sample')).toThrow('no permission to change this sample');
  });
});

describe('denials', () => {
  const as = (caller: Caller, action: Action, what?: string) => {
    const e = denial(caller, action, what);
    return { kind: e.kind, code: e.code, message: e.message, details: e.details };
  };
  const viewer = { user_id: USER, role: 'viewer', scopes: ['read'] };
  const researcher = { user_id: USER, role: 'researcher', scopes: ['read', 'write'] };
  const key = { user_id: null, scopes: ['read', 'write'] };

  it('words each refusal as the services always have', () => {
    expect(as(viewer, 'write')).toEqual({ kind: 'forbidden', code: 'forbidden', message: 'the viewer role cannot change records', details: undefined });
    expect(as(viewer, 'write', 'lab orders').message).toBe('the viewer role cannot change lab orders');
    expect(as(viewer, 'sign').message).toBe('the viewer role cannot sign experiments');
    expect(as(researcher, 'delete', 'a device').message).toBe('deleting a device needs an administrator role');
    expect(as(researcher, 'release_result')).toEqual({
      kind: 'forbidden',
      code: 'forbidden',
      message: 'releasing a result needs the admin or qm role',
      details: { required_roles: ['admin', 'qm'] },
    });
    expect(as(key, 'release_result')).toEqual({
      kind: 'forbidden',
      code: 'forbidden',
      message: 'releasing a result with a token without a user needs the admin scope',
      details: { required_scope: 'admin' },
    });
    expect(as(researcher, 'administer', 'job_type audit_export')).toMatchObject({
      code: 'admin_required',
      message: 'job_type audit_export needs an administrator',
    });
  });
});
