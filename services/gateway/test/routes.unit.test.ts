import { ROUTES } from '@lab/http-api';
import { Router } from '../src/router';

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

  it('routes amendments, versions and signatures of an experiment, and the audit verification for the operator', () => {
    expect(router.match('POST', '/v1/experiments/x/amendments')).toMatchObject({
      kind: 'found',
      params: { id: 'x' },
      route: { auth: 'bearer', scope: 'write', idempotent: true, service: 'notebook', handler: { kind: 'experiment', op: 'amend' } },
    });
    expect(router.match('GET', '/v1/experiments/x/versions')).toMatchObject({ route: { scope: 'read', idempotent: false, handler: { op: 'versions' } } });
    expect(router.match('GET', '/v1/experiments/x/signatures')).toMatchObject({ route: { scope: 'read', handler: { op: 'signatures' } } });
    expect(router.match('PATCH', '/v1/experiments/x/amendments')).toEqual({ kind: 'method_not_allowed', allowed: ['POST'] });
    expect(router.match('GET', '/admin/v1/orgs/o/audit/verify')).toMatchObject({
      kind: 'found',
      params: { org_id: 'o' },
      route: { auth: 'operator', service: 'audit', handler: { kind: 'audit_verify' } },
    });
  });

  it('needs module lab_equipment for equipment', () => {
    expect(router.match('GET', '/v1/equipment')).toMatchObject({ kind: 'found', route: { module: 'lab_equipment' } });
  });

  it('has no update route for stock movements', () => {
    expect(router.match('PATCH', '/v1/stock-movements/x')).toEqual({ kind: 'method_not_allowed', allowed: ['GET', 'HEAD', 'DELETE'] });
  });

  it('names in Allow the methods of the path the document has, not of a template with a parameter there', () => {
    expect(router.match('OPTIONS', '/v1/results/upload')).toEqual({ kind: 'method_not_allowed', allowed: ['POST'] });
    expect(router.match('PUT', '/v1/results/upload')).toEqual({ kind: 'method_not_allowed', allowed: ['POST'] });
    // not a GET of /v1/results/{id} with the id "upload"
    expect(router.match('GET', '/v1/results/upload')).toEqual({ kind: 'method_not_allowed', allowed: ['POST'] });
  });

  it('answers HEAD wherever it answers GET, and names it in Allow beside GET', () => {
    expect(router.match('HEAD', '/v1/samples/x1')).toMatchObject({ kind: 'found', route: { method: 'GET', path: '/v1/samples/:id' }, params: { id: 'x1' } });
    expect(router.match('HEAD', '/v1/health')).toMatchObject({ kind: 'found', route: { method: 'GET', path: '/v1/health' } });
    expect(router.match('HEAD', '/v1/results/upload')).toEqual({ kind: 'method_not_allowed', allowed: ['POST'] });
    expect(router.match('HEAD', '/functions/v1/mcp')).toEqual({ kind: 'method_not_allowed', allowed: ['POST'] });
  });

  it('answers 405 with the allowed methods and 404 for unknown paths', () => {
    expect(router.match('DELETE', '/v1/samples')).toEqual({ kind: 'method_not_allowed', allowed: ['GET', 'HEAD', 'POST'] });
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

  it('serves every route of the management contract for reading and undoing what was made', () => {
    const contract = [
      'GET /admin/v1/orgs',
      'GET /admin/v1/orgs/o',
      'GET /admin/v1/orgs/o/departments',
      'DELETE /admin/v1/orgs/o/departments/d',
      'GET /admin/v1/users',
      'GET /admin/v1/users/u',
      'GET /admin/v1/orgs/o/members',
      'GET /admin/v1/orgs/o/api-keys',
      'GET /admin/v1/users/u/pats',
      'GET /admin/v1/orgs/o/environmental-points',
      'DELETE /admin/v1/orgs/o/environmental-points/p',
      'GET /admin/v1/orgs/o/webhook-subscriptions',
      'GET /admin/v1/orgs/o/webhook-subscriptions/s',
      'PATCH /admin/v1/orgs/o/webhook-subscriptions/s',
      'DELETE /admin/v1/orgs/o/webhook-subscriptions/s',
      'POST /admin/v1/orgs/o/webhook-subscriptions/s/rotate-secret',
      'POST /admin/v1/orgs/o/webhook-subscriptions/s/deliveries/d/redeliver',
      'GET /admin/v1/orgs/o/inbound-endpoints',
      'GET /admin/v1/orgs/o/inbound-endpoints/e',
      'PATCH /admin/v1/orgs/o/inbound-endpoints/e',
      'DELETE /admin/v1/orgs/o/inbound-endpoints/e',
      'POST /admin/v1/orgs/o/inbound-endpoints/e/rotate-secret',
      'GET /admin/v1/oauth-clients',
      'GET /admin/v1/oauth-clients/c',
      'DELETE /admin/v1/oauth-clients/c',
    ];
    for (const line of contract) {
      const [method, path] = line.split(' ') as [string, string];
      expect([line, router.match(method, path)]).toEqual([
        line,
        expect.objectContaining({ kind: 'found', route: expect.objectContaining({ auth: 'operator' }) }),
      ]);
    }
    expect(router.match('POST', '/admin/v1/orgs/o/webhook-subscriptions/s/deliveries/d/redeliver')).toMatchObject({
      params: { org_id: 'o', id: 's', delivery_id: 'd' },
      route: { service: 'webhooks', handler: { kind: 'webhooks_admin', action: 'redeliver' } },
    });
    expect(router.match('DELETE', '/admin/v1/orgs/o/environmental-points/p')).toMatchObject({
      route: { service: 'telemetry', handler: { op: 'deletePoint' } },
    });
    expect(router.match('PUT', '/admin/v1/orgs/o/webhook-subscriptions/s')).toEqual({
      kind: 'method_not_allowed',
      allowed: ['GET', 'HEAD', 'PATCH', 'DELETE'],
    });
  });
});

/** The table scanned in full, as the router did before it indexed routes: the reference. */
function scanAll(method: string, path: string, table: typeof ROUTES = ROUTES) {
  const parts = path.split('/').filter((s) => s.length > 0);
  let best: { route: (typeof ROUTES)[number]; params: Record<string, string>; literals: number } | undefined;
  // the other methods of the path, by how specific their template is (the most specific answer Allow)
  const allowed = new Map<string, number>();
  for (const route of table) {
    const pattern = route.path.split('/').filter((s) => s.length > 0);
    if (pattern.length !== parts.length) continue;
    const params: Record<string, string> = {};
    let ok = true;
    for (let i = 0; i < pattern.length && ok; i++) {
      if (pattern[i]!.startsWith(':')) {
        try {
          params[pattern[i]!.slice(1)] = decodeURIComponent(parts[i]!);
        } catch {
          ok = false;
        }
      } else if (pattern[i] !== parts[i]) ok = false;
    }
    if (!ok) continue;
    const literals = pattern.filter((s) => !s.startsWith(':')).length;
    // HEAD is a GET without the body
    const servesHead = route.method === 'GET';
    if (method === 'HEAD' ? !servesHead : route.method !== method) {
      allowed.set(route.method, Math.max(literals, allowed.get(route.method) ?? 0));
      if (servesHead) allowed.set('HEAD', Math.max(literals, allowed.get('HEAD') ?? 0));
      continue;
    }
    if (!best || literals > best.literals) best = { route, params, literals };
  }
  const most = Math.max(...allowed.values());
  // a more specific template of another method wins the path (it is the document's path)
  if (best && !(allowed.size && most > best.literals)) return { kind: 'found', route: best.route, params: best.params };
  if (allowed.size) return { kind: 'method_not_allowed', allowed: [...allowed].filter(([, n]) => n === most).map(([m]) => m) };
  return { kind: 'not_found' };
}

describe('route index', () => {
  it('answers every method on every route path, and on near misses, as a scan of the whole table would', () => {
    const methods = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'];
    const paths = new Set<string>(['/', '/v1', '/v1/', '/nope/v1/samples']);
    for (const r of ROUTES) {
      const concrete = r.path.replace(/:[a-z_]+/g, 'x1');
      paths.add(concrete);
      paths.add(r.path.replace(/:[a-z_]+/g, '%E0%A4%A')); // undecodable parameter
      paths.add(`${concrete}/extra`);
      paths.add(concrete.split('/').slice(0, -1).join('/') || '/');
      paths.add(concrete.replace('/v1/', '/v2/'));
    }
    let compared = 0;
    for (const path of paths) {
      for (const method of methods) {
        const want = scanAll(method, path);
        const got = router.match(method, path);
        expect({ method, path, got: got.kind === 'method_not_allowed' ? { ...got, allowed: [...got.allowed].sort() } : got }).toEqual({
          method,
          path,
          got: want.kind === 'method_not_allowed' ? { ...want, allowed: [...(want.allowed as string[])].sort() } : want,
        });
        compared++;
      }
    }
    expect(compared).toBeGreaterThan(1000);
  });

  it('keeps routes with a parameter in second place among the candidates of every literal', () => {
    const route = (method: string, path: string) => ({ ...ROUTES[0]!, method, path }) as (typeof ROUTES)[number];
    const table = [
      route('GET', '/v1/:kind'),
      route('GET', '/v1/health'),
      route('POST', '/v1/samples'),
      route('DELETE', '/:a/b'),
      route('GET', '/x'),
      route('PUT', '/v1/:kind/:id'),
      route('GET', '/v1/samples/:id'),
    ];
    const small = new Router(table);
    for (const path of ['/v1/health', '/v1/samples', '/v1/other', '/v1/b', '/x/b', '/v1/samples/1', '/v1/other/1', '/x', '/', '/v1/%E0%A4%A']) {
      for (const method of ['GET', 'HEAD', 'POST', 'PUT', 'DELETE']) {
        const want = scanAll(method, path, table);
        expect({ method, path, got: small.match(method, path) }).toEqual({ method, path, got: want });
      }
    }
  });
});
