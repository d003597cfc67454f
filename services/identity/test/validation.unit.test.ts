import { DomainError, RATE_LIMIT_BOUNDS } from '@lab/kit';
import { grantsScope } from '@lab/permissions';
import { parse, schemas } from '../src/validation';

const ORG = '0190a4f0-1234-7abc-8def-0123456789ab';
const apiKey = (over: Record<string, unknown>) => ({ org_id: ORG, name: 'k', scopes: ['read'], device_ids: [], ...over });

function rejection(fn: () => unknown): DomainError {
  try {
    fn();
  } catch (err) {
    if (err instanceof DomainError) return err;
    throw err;
  }
  throw new Error('expected a DomainError');
}

describe('scope validation', () => {
  it('accepts every allowed scope and drops duplicates', () => {
    const r = parse(schemas.createApiKey, apiKey({ scopes: ['read', 'write', 'audit:read', 'admin', '*', 'devices:register', 'read'] }));
    expect(r.scopes).toEqual(['read', 'write', 'audit:read', 'admin', '*', 'devices:register']);
  });

  it.each([[['read', 'delete']], [['READ']], [[]], [['']]])('rejects %j with 400 validation_failed', (scopes) => {
    const err = rejection(() => parse(schemas.createPat, { user_id: ORG, name: 'p', scopes }));
    expect(err.kind).toBe('invalid');
    expect(err.code).toBe('validation_failed');
    expect(JSON.stringify(err.details)).toContain('scopes');
  });

  it('lets admin and * imply every scope (the one rule, kit access.ts)', () => {
    expect(grantsScope(['read'], 'read')).toBe(true);
    expect(grantsScope(['read'], 'write')).toBe(false);
    expect(grantsScope(['admin'], 'audit:read')).toBe(true);
    expect(grantsScope(['*'], 'devices:register')).toBe(true);
  });
});

describe('request validation', () => {
  it('names the bad field of a non-UUID id', () => {
    const err = rejection(() => parse(schemas.orgId, { org_id: 'nope' }));
    expect(err.details).toEqual({ field: 'org_id', fields: [{ path: 'org_id', message: 'must be a UUID' }] });
  });

  it('keeps modules to the known set, deduplicated in canonical order', () => {
    expect(parse(schemas.createOrg, { name: 'Lab', modules: ['sample_intake', 'lab_equipment', 'sample_intake'] }).modules).toEqual([
      'lab_equipment',
      'sample_intake',
    ]);
    expect(rejection(() => parse(schemas.createOrg, { name: 'Lab', modules: ['billing'] })).code).toBe('validation_failed');
  });

  it.each([
    [{ name: '', modules: [] }],
    [{ name: 'x'.repeat(201), modules: [] }],
    [{ name: 'Lab', modules: [], rate_limit: { per_minute: 0, per_hour: 10 } }],
    [{ name: 'Lab', modules: [], rate_limit: { per_minute: 1.5, per_hour: 10 } }],
  ])('rejects org %j', (input) => {
    expect(rejection(() => parse(schemas.createOrg, input)).kind).toBe('invalid');
  });

  it('refuses the rate limits the gateway refuses: the bounds are one schema (@lab/kit rateLimitBody)', () => {
    const over = { per_minute: RATE_LIMIT_BOUNDS.per_minute + 1, per_hour: 10 };
    expect(rejection(() => parse(schemas.createOrg, { name: 'Lab', modules: [], rate_limit: over })).kind).toBe('invalid');
    expect(rejection(() => parse(schemas.updateOrg, { org_id: ORG, rate_limit: over })).kind).toBe('invalid');
    const overHour = { per_minute: 10, per_hour: RATE_LIMIT_BOUNDS.per_hour + 1 };
    expect(rejection(() => parse(schemas.updateOrg, { org_id: ORG, rate_limit: overHour })).kind).toBe('invalid');
    const atBounds = { per_minute: RATE_LIMIT_BOUNDS.per_minute, per_hour: RATE_LIMIT_BOUNDS.per_hour };
    expect(parse(schemas.updateOrg, { org_id: ORG, rate_limit: atBounds }).rate_limit).toEqual(atBounds);
  });

  it('validates emails and password length of new users', () => {
    expect(parse(schemas.createUser, { email: ' Ada@Example.org ' }).email).toBe('Ada@Example.org');
    expect(rejection(() => parse(schemas.createUser, { email: 'not-an-email' })).kind).toBe('invalid');
    expect(rejection(() => parse(schemas.createUser, { email: `${'a'.repeat(315)}@ex.org` })).kind).toBe('invalid');
    expect(rejection(() => parse(schemas.createUser, { email: 'a@ex.org', password: 'short' })).kind).toBe('invalid');
  });

  // PostgreSQL's text cannot hold NUL: each of these was a failed insert or lookup (500)
  it.each([
    ['createOrg', { name: 'a\u0000', modules: [] }, 'name'],
    ['updateOrg', { org_id: ORG, name: 'a\u0000' }, 'name'],
    ['createDepartment', { org_id: ORG, name: 'Chem\u0000' }, 'name'],
    ['createUser', { email: 'u@ex.org', name: '\u0000' }, 'name'],
    ['createApiKey', { org_id: ORG, name: 'k\u0000', scopes: ['read'] }, 'name'],
    ['createPat', { user_id: ORG, name: 'p\u0000', scopes: ['read'] }, 'name'],
    ['createOAuthClient', { name: 'c\u0000', redirect_uris: ['https://x.org/cb'], scopes: [] }, 'name'],
    ['createOAuthClient', { name: 'c', redirect_uris: ['https://x.org/c\u0000b'], scopes: [] }, 'redirect_uris.0'],
    ['passwordGrant', { email: 'a\u0000@ex.org', password: 'xxxxxxxx' }, 'email'],
  ] as const)('refuses NUL in %s, naming the field', (schema, input, path) => {
    const err = rejection(() => parse(schemas[schema], input));
    expect(err.code).toBe('validation_failed');
    expect((err.details as { fields: { path: string }[] }).fields.map((f) => f.path)).toContain(path);
  });

  it('only knows the five roles', () => {
    expect(parse(schemas.putMember, { org_id: ORG, user_id: ORG, role: 'qm' }).role).toBe('qm');
    expect(rejection(() => parse(schemas.putMember, { org_id: ORG, user_id: ORG, role: 'owner' })).kind).toBe('invalid');
  });
});
