import { DomainError } from '@lab/kit';
import { toPrincipal, type TokenContextRow } from '../src/principal';

const ORG = '0190a4f0-0000-7000-8000-00000000000a';
const OTHER = '0190a4f0-0000-7000-8000-00000000000b';
const USER = '0190a4f0-0000-7000-8000-00000000000c';

/** A token row as the resolve query returns it, acting in ORG. */
const row = (over: Partial<TokenContextRow>): TokenContextRow => ({
  token_id: '0190a4f0-0000-7000-8000-00000000000d',
  kind: 'pat',
  user_id: USER,
  bound_org_id: null,
  scopes: ['read'],
  connector_id: null,
  device_ids: [],
  org_id: ORG,
  modules: ['lab_equipment'],
  per_minute: 120,
  per_hour: 5000,
  role: 'researcher',
  department_id: null,
  ...over,
});

function codeOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    if (err instanceof DomainError) return `${err.kind}/${err.code}`;
    throw err;
  }
  return 'ok';
}

describe('ResolveToken rules', () => {
  it('answers 401 for no token and for refresh tokens', () => {
    expect(codeOf(() => toPrincipal(null, ORG))).toBe('unauthenticated/unauthorized');
    expect(codeOf(() => toPrincipal(row({ kind: 'refresh' }), ORG))).toBe('unauthenticated/unauthorized');
  });

  it('uses the bound org and rejects a different selection', () => {
    const bound = row({ kind: 'api_key', bound_org_id: ORG });
    expect(toPrincipal(bound, undefined).org_id).toBe(ORG);
    expect(toPrincipal(bound, ORG).org_bound).toBe(true);
    expect(codeOf(() => toPrincipal(bound, OTHER))).toBe('forbidden/org_mismatch');
  });

  it('needs an org selection for unbound tokens', () => {
    expect(codeOf(() => toPrincipal(row({ org_id: null }), undefined))).toBe('invalid/org_required');
    const p = toPrincipal(row({}), ORG);
    expect(p).toMatchObject({ org_id: ORG, role: 'researcher', org_bound: false, modules: ['lab_equipment'] });
  });

  it('answers not_a_member for a missing org and for a user without membership', () => {
    expect(codeOf(() => toPrincipal(row({ org_id: null, modules: null, per_minute: null, per_hour: null }), OTHER))).toBe('forbidden/not_a_member');
    expect(codeOf(() => toPrincipal(row({ role: null }), ORG))).toBe('forbidden/not_a_member');
  });

  it('gives an API key without user no role, and keeps its connector and devices', () => {
    const p = toPrincipal(row({ kind: 'api_key', user_id: null, role: null, bound_org_id: ORG, connector_id: OTHER, device_ids: [USER] }), undefined);
    expect(p.role).toBeUndefined();
    expect(p.user_id).toBeUndefined();
    expect(p).toMatchObject({ connector_id: OTHER, device_ids: [USER], rate_limit: { per_minute: 120, per_hour: 5000 } });
  });
});
