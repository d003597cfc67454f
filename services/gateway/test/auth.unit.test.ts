import type { identity } from '@lab/contracts';
import { bearerOf, callerOf, orgSelection } from '../src/auth';
import { invalidateFromEvent, PrincipalCache } from '../src/principal-cache';
import { checkWritePermission, testModeReply } from '../src/test-mode';

const ORG = '0190a0c8-0000-7000-8000-00000000000a';
const ORG2 = '0190a0c8-0000-7000-8000-00000000000b';

const principal = (over: Partial<identity.Principal> = {}): identity.Principal => ({
  token_id: 't1',
  token_kind: 'pat',
  user_id: 'u1',
  org_id: ORG,
  scopes: ['read'],
  role: 'researcher',
  device_ids: [],
  modules: [],
  org_bound: false,
  ...over,
});

describe('bearerOf', () => {
  it('reads a bearer token, case-insensitively', () => {
    expect(bearerOf('Bearer abc')).toBe('abc');
    expect(bearerOf('bearer abc')).toBe('abc');
  });
  it.each([[undefined], [''], ['Bearer'], ['Basic abc'], ['Bearer a b']])('refuses %j with 401', (h) => {
    expect(() => bearerOf(h)).toThrow(expect.objectContaining({ kind: 'unauthenticated', code: 'unauthorized' }));
  });
});

describe('orgSelection', () => {
  it('takes the query or the header, lowercased', () => {
    expect(orgSelection(ORG.toUpperCase(), undefined)).toBe(ORG);
    expect(orgSelection(undefined, ORG)).toBe(ORG);
    expect(orgSelection(ORG, ORG)).toBe(ORG);
    expect(orgSelection(undefined, undefined)).toBeUndefined();
  });
  it.each([
    ['not-a-uuid', undefined],
    [undefined, 'nope'],
    [ORG, ORG2],
    [[ORG, ORG], undefined],
  ])('refuses %j / %j with 400', (q, h) => {
    expect(() => orgSelection(q, h)).toThrow(expect.objectContaining({ kind: 'invalid' }));
  });
});

describe('callerOf', () => {
  it('carries who, where and how into the caller context', () => {
    const c = callerOf(principal({ department_id: 'd1', connector_id: 'c1', device_ids: ['x'] }), 'req-1');
    expect(c).toEqual({
      org_id: ORG,
      user_id: 'u1',
      role: 'researcher',
      department_id: 'd1',
      scopes: ['read'],
      token_kind: 'pat',
      token_id: 't1',
      request_id: 'req-1',
      connector_id: 'c1',
      device_ids: ['x'],
    });
  });
});

describe('PrincipalCache', () => {
  let now = 0;
  const cache = () => new PrincipalCache(1_000, 10, () => now);

  it('resolves once within the TTL and again after it', async () => {
    const c = cache();
    let calls = 0;
    const resolve = async () => (calls++, principal());
    await c.get('k', resolve);
    await c.get('k', resolve);
    expect(calls).toBe(1);
    now += 1_001;
    await c.get('k', resolve);
    expect(calls).toBe(2);
  });

  it('shares one resolution between concurrent lookups', async () => {
    const c = cache();
    let calls = 0;
    const resolve = () => new Promise<identity.Principal>((r) => setImmediate(() => r((calls++, principal()))));
    await Promise.all([c.get('k', resolve), c.get('k', resolve), c.get('k', resolve)]);
    expect(calls).toBe(1);
  });

  it('does not cache a resolution that overlapped an invalidation', async () => {
    const c = cache();
    let release!: () => void;
    const pending = c.get('k', () => new Promise((r) => (release = () => r(principal()))));
    c.dropToken('t1');
    release();
    await pending;
    expect(c.size).toBe(0);
  });

  it.each([
    ['identity.token.revoked', { token_id: 't1' }, 1],
    ['identity.token.revoked', { token_id: 'other' }, 2],
    ['identity.member.removed', { org_id: ORG, user_id: 'u1' }, 1],
    ['identity.member.changed', { org_id: ORG2, user_id: 'u1' }, 1],
    ['identity.org.updated', { org_id: ORG }, 1],
    ['identity.something.else', { org_id: ORG }, 2],
  ])('applies %s %j', async (type, data, left) => {
    const c = cache();
    await c.get('a', async () => principal());
    await c.get('b', async () => principal({ token_id: 't2', org_id: ORG2 }));
    invalidateFromEvent(c, type, data);
    expect(c.size).toBe(left);
  });

  it('stays within its size bound', async () => {
    const c = cache();
    for (let i = 0; i < 25; i++) await c.get(`k${i}`, async () => principal());
    expect(c.size).toBe(10);
  });
});

describe('X-Test-Mode write permission', () => {
  // the refusals of the real write (the records engine), word for word
  it('refuses viewers', () => {
    expect(() => checkWritePermission(principal({ role: 'viewer' }), 'create')).toThrow(
      expect.objectContaining({ kind: 'forbidden', code: 'forbidden', message: 'the viewer role cannot change records' }),
    );
  });
  it('lets members create but only administrators delete', () => {
    expect(() => checkWritePermission(principal(), 'create')).not.toThrow();
    expect(() => checkWritePermission(principal(), 'delete')).toThrow(
      expect.objectContaining({ kind: 'forbidden', code: 'forbidden', message: 'deleting records needs an administrator role' }),
    );
    expect(() => checkWritePermission(principal({ role: 'admin' }), 'delete')).not.toThrow();
  });
  it('lets an API key without user delete only with the admin scope', () => {
    const key = { token_kind: 'api_key', user_id: undefined, role: undefined };
    expect(() => checkWritePermission(principal({ ...key, scopes: ['write'] }), 'delete')).toThrow();
    expect(() => checkWritePermission(principal({ ...key, scopes: ['admin'] }), 'delete')).not.toThrow();
    expect(() => checkWritePermission(principal({ ...key, scopes: ['write'], role: 'admin', user_id: 'u' }), 'delete')).not.toThrow();
  });
});

describe('X-Test-Mode echo', () => {
  const admin = principal({ role: 'admin', scopes: ['write'] });
  it('echoes would_apply without validating fields', () => {
    expect(JSON.parse(testModeReply(admin, 'create', 'samples', undefined, { zz: 1 }).body as string)).toEqual({
      data: { test_mode: true, would_apply: { operation: 'create', resource: 'samples', body: { zz: 1 } } },
    });
  });
  // an array or scalar body was echoed with 200, although the real write refuses it
  it.each([[[1]], [[]], [5], ['x'], [null]])('refuses the body %j with 400, as the real write does', (body) => {
    for (const op of ['create', 'update', 'replace'] as const) {
      expect(() => testModeReply(admin, op, 'samples', op === 'create' ? undefined : ORG, body)).toThrow(
        expect.objectContaining({ kind: 'invalid', code: 'validation_failed' }),
      );
    }
  });
  it('needs no body for a delete', () => {
    expect(testModeReply(admin, 'delete', 'samples', ORG, undefined).status).toBe(200);
  });
});
