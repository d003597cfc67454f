import { hasScope, missingScopeMessage } from '../src/scopes';

// Which scope implies which is the permission model's rule, tested once in libs/permissions;
// what the gateway adds is a route that demands no scope, and the 403's wording.
describe('hasScope', () => {
  it.each([
    [[], 'none', true],
    [['read'], 'none', true],
    [[], 'read', false],
    [['write'], 'read', true],
  ] as const)('%j grants %s: %s', (granted, required, expected) => {
    expect(hasScope(granted, required)).toBe(expected);
  });

  it('names the missing scope', () => {
    expect(missingScopeMessage('read')).toBe('token lacks the read scope');
  });
});
