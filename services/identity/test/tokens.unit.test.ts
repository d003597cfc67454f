import { createHash } from 'node:crypto';
import { displayPrefix, hashToken, newApiKey, newPrefixedToken, parseApiKeyOrg, tokenKindOf } from '../src/tokens';

const ORG = '0190a4f0-1234-7abc-8def-0123456789ab';

describe('token formats', () => {
  it('builds API keys with the fixed prefix, the org as 32 hex and 43 random base64url characters', () => {
    const key = newApiKey(ORG);
    expect(key).toMatch(/^lab_0190a4f012347abc8def0123456789ab_[A-Za-z0-9_-]{43}$/);
    expect(newApiKey(ORG)).not.toBe(key);
  });

  it('reads the org back out of an API key, even when the random part holds underscores', () => {
    expect(parseApiKeyOrg(newApiKey(ORG))).toBe(ORG);
    expect(parseApiKeyOrg(`lab_0190a4f012347abc8def0123456789ab_${'_'.repeat(43)}`)).toBe(ORG);
  });

  it.each([
    ['a PAT', () => newPrefixedToken('pat')],
    ['a short random part', () => `lab_0190a4f012347abc8def0123456789ab_${'a'.repeat(42)}`],
    ['uppercase hex', () => `lab_0190A4F012347ABC8DEF0123456789AB_${'a'.repeat(43)}`],
    ['a missing org', () => `lab__${'a'.repeat(43)}`],
    ['trailing text', () => `${newApiKey(ORG)}x`],
  ])('parseApiKeyOrg rejects %s', (_label, make) => {
    expect(parseApiKeyOrg(make())).toBeNull();
  });

  it('gives prefixed tokens their prefix and kind', () => {
    expect(newPrefixedToken('pat')).toMatch(/^pat_[A-Za-z0-9_-]{43}$/);
    expect(tokenKindOf(newPrefixedToken('pat'))).toBe('pat');
    expect(tokenKindOf(newPrefixedToken('session'))).toBe('session');
    expect(tokenKindOf(newPrefixedToken('refresh'))).toBe('refresh');
    expect(tokenKindOf(newApiKey(ORG))).toBe('api_key');
    expect(tokenKindOf('pat_short')).toBeNull();
    expect(tokenKindOf('eyJhbGciOiJIUzI1NiJ9.e30.x')).toBeNull();
  });

  it('hashes the whole token as lowercase hex SHA-256', () => {
    const t = newPrefixedToken('pat');
    expect(hashToken(t)).toBe(createHash('sha256').update(t).digest('hex'));
    expect(hashToken(t)).toMatch(/^[0-9a-f]{64}$/);
    expect(hashToken(`${t}x`)).not.toBe(hashToken(t));
  });

  it('keeps as display prefix the part before the secret and 6 of its 43 characters, and nothing of short-lived tokens', () => {
    const key = newApiKey(ORG);
    expect(displayPrefix('api_key', key)).toBe(key.slice(0, 'lab_'.length + 32 + 1 + 6));
    const pat = newPrefixedToken('pat');
    expect(displayPrefix('pat', pat)).toMatch(/^pat_[A-Za-z0-9_-]{6}$/);
    expect(pat.startsWith(displayPrefix('pat', pat)!)).toBe(true);
    for (const kind of ['session', 'refresh', 'oauth', 'oauth_refresh'] as const) expect(displayPrefix(kind, newPrefixedToken(kind))).toBeNull();
  });
});
