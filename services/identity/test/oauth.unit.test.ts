import { scopesForRole } from '../src/scopes';
import { toPrincipal, type TokenContextRow } from '../src/principal';
import { newPrefixedToken, tokenKindOf } from '../src/tokens';
import { isAllowedRedirectUri, redirectUriRegistered } from '../src/validation';

describe('OAuth rules', () => {
  it('keeps admin-only scopes for admins only', () => {
    expect(scopesForRole(['read', 'admin', 'audit:read', '*'], 'admin')).toEqual(['read', 'admin', 'audit:read', '*']);
    for (const role of ['dept_admin', 'researcher', 'qm', 'viewer', null]) {
      expect(scopesForRole(['read', 'write', 'admin', 'audit:read', '*'], role)).toEqual(['read', 'write']);
    }
  });

  it.each([
    ['https://app.example.com/cb', true],
    ['https://app.example.com/cb?x=1', true],
    ['http://localhost:8080/cb', true],
    ['http://127.0.0.1/cb', true],
    ['http://app.example.com/cb', false],
    ['https://app.example.com/cb#frag', false],
    ['https://user:pw@app.example.com/cb', false],
    ['javascript:alert(1)', false],
    ['/relative', false],
    ['http://localhost.evil.com/cb', false],
    // the parser reads a backslash as a slash: this one reads as lab.example.org and goes to attacker.example
    ['https://attacker.example\\@lab.example.org/callback', false],
    ['https://app.example.com/cb\r\nX: y', false],
    ['https://app.example.com/c\tb', false],
  ])('redirect URI %j allowed: %s', (uri, ok) => {
    expect(isAllowedRedirectUri(uri)).toBe(ok);
  });

  it('tells OAuth tokens apart by prefix', () => {
    expect(tokenKindOf(newPrefixedToken('oauth'))).toBe('oauth');
    expect(tokenKindOf(newPrefixedToken('oauth_refresh'))).toBe('oauth_refresh');
    expect(newPrefixedToken('oauth')).toMatch(/^oat_/);
    expect(newPrefixedToken('oauth_refresh')).toMatch(/^ort_/);
  });

  const row = (over: Partial<TokenContextRow>): TokenContextRow => ({
    token_id: 't',
    kind: 'oauth',
    user_id: 'u',
    bound_org_id: 'o',
    scopes: ['read', 'admin'],
    connector_id: null,
    device_ids: [],
    org_id: 'o',
    modules: [],
    per_minute: 1,
    per_hour: 1,
    role: 'admin',
    department_id: null,
    ...over,
  });

  it('drops admin scopes of an OAuth token whose user is no longer an admin', () => {
    expect(toPrincipal(row({}), undefined).scopes).toEqual(['read', 'admin']);
    expect(toPrincipal(row({ role: 'researcher' }), undefined).scopes).toEqual(['read']);
    expect(toPrincipal(row({ kind: 'oauth' }), undefined).token_kind).toBe('oauth');
  });

  it('never accepts an OAuth refresh token as a bearer token', () => {
    expect(() => toPrincipal(row({ kind: 'oauth_refresh' }), undefined)).toThrow();
  });

  it.each([
    ['http://127.0.0.1:50123/callback', true, true],
    ['http://localhost:9/callback', true, true],
    ['http://127.0.0.1:50123/callback', false, false],
    ['http://127.0.0.1:50123/other', true, false],
    ['http://127.0.0.1:50123/callback?x=1', true, false],
    ['http://evil.example:33418/callback', true, false],
    ['https://app.example.com:8443/cb', true, false],
    ['https://app.example.com/cb', false, true],
    // registered URIs are stored normalised: the URI as the client registered it still matches
    ['https://APP.example.com:443/x/../cb', true, true],
    ['https://app.example.com\\cb', true, false],
    // stored before such URIs were refused: never matched
    ['https://attacker.example\\@lab.example.org/callback', false, false],
  ])('matches %j (public client: %s) against the registered URIs: %s', (given, publicClient, expected) => {
    const registered = [
      'http://127.0.0.1:33418/callback',
      'http://localhost/callback',
      'https://app.example.com/cb',
      'https://attacker.example\\@lab.example.org/callback',
    ];
    expect(redirectUriRegistered(registered, given, publicClient)).toBe(expected);
  });
});
