import { hasScope, missingScopeMessage } from '../src/scopes';

describe('hasScope', () => {
  it.each([
    [['read'], 'read', true],
    [['read'], 'write', false],
    [['write'], 'read', true],
    [['write'], 'audit:read', false],
    [['audit:read'], 'read', false],
    [['admin'], 'audit:read', true],
    [['admin'], 'devices:register', true],
    [['*'], 'write', true],
    [['devices:register'], 'read', false],
    [[], 'read', false],
    [[], 'none', true],
  ] as const)('%j grants %s: %s', (granted, required, expected) => {
    expect(hasScope(granted, required)).toBe(expected);
  });

  it('names the missing scope', () => {
    expect(missingScopeMessage('read')).toBe('token lacks the read scope');
  });
});
