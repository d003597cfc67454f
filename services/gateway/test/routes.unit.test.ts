import { ROUTES, Router } from '../src/routes';

const router = new Router(ROUTES);

describe('route table', () => {
  it('maps generic CRUD to scopes, idempotency and statuses', () => {
    const list = router.match('GET', '/v1/samples');
    expect(list).toMatchObject({ kind: 'found', route: { scope: 'read', idempotent: false, service: 'notebook' } });
    const create = router.match('POST', '/v1/samples');
    expect(create).toMatchObject({ kind: 'found', route: { scope: 'write', idempotent: true, handler: { op: 'create' } } });
    const del = router.match('DELETE', '/v1/experiments/abc');
    expect(del).toMatchObject({ kind: 'found', params: { id: 'abc' }, route: { handler: { op: 'delete', resource: 'experiments' } } });
  });

  it('needs module lab_equipment for equipment', () => {
    expect(router.match('GET', '/v1/equipment')).toMatchObject({ kind: 'found', route: { module: 'lab_equipment' } });
  });

  it('has no update route for stock movements', () => {
    expect(router.match('PATCH', '/v1/stock-movements/x')).toEqual({ kind: 'method_not_allowed', allowed: ['GET', 'DELETE'] });
  });

  it('answers 405 with the allowed methods and 404 for unknown paths', () => {
    expect(router.match('DELETE', '/v1/samples')).toEqual({ kind: 'method_not_allowed', allowed: ['GET', 'POST'] });
    expect(router.match('GET', '/v1/unknown')).toEqual({ kind: 'not_found' });
    expect(router.match('GET', '/v1/samples/a/b')).toEqual({ kind: 'not_found' });
  });

  it('prefers literal segments over parameters and decodes parameters', () => {
    expect(router.match('GET', '/v1/health')).toMatchObject({ kind: 'found', route: { auth: 'none' } });
    expect(router.match('GET', '/v1/samples/a%20b')).toMatchObject({ params: { id: 'a b' } });
    expect(router.match('GET', '/v1/samples/%E0%A4%A')).toEqual({ kind: 'not_found' });
  });

  it('puts the management API behind the operator token', () => {
    for (const r of ROUTES.filter((x) => x.path.startsWith('/admin/'))) expect(r.auth).toBe('operator');
    expect(router.match('PUT', '/admin/v1/orgs/o/members/u')).toMatchObject({ params: { org_id: 'o', user_id: 'u' } });
  });

  it('has one route per method and path', () => {
    const keys = ROUTES.map((r) => `${r.method} ${r.path}`);
    expect(new Set(keys).size).toBe(keys.length);
  });
});
