import { grantsScope, isAdministrator } from '../src/access';

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

describe('isAdministrator', () => {
  it('is the role for a user, whatever the token holds', () => {
    expect(isAdministrator({ user_id: 'u', role: 'admin', scopes: ['read'] })).toBe(true);
    expect(isAdministrator({ user_id: 'u', role: 'researcher', scopes: ['*'] })).toBe(false);
  });

  it('is the admin scope or * for a token without a user', () => {
    expect(isAdministrator({ user_id: null, role: null, scopes: ['admin'] })).toBe(true);
    expect(isAdministrator({ user_id: null, role: null, scopes: ['*'] })).toBe(true);
    expect(isAdministrator({ user_id: null, role: null, scopes: ['write'] })).toBe(false);
    expect(isAdministrator({ scopes: ['read'] })).toBe(false);
  });
});
