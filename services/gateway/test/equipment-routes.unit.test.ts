import { openApiDocument } from '../src/openapi';
import { EQUIPMENT_SUBRESOURCES, ROUTES, Router } from '../src/routes';

const router = new Router(ROUTES);

describe('equipment routes', () => {
  it.each(EQUIPMENT_SUBRESOURCES)('routes %s with module, scopes, idempotency and the parent', (sub) => {
    expect(router.match('GET', `/v1/equipment/e1/${sub}`)).toMatchObject({
      kind: 'found',
      params: { id: 'e1' },
      route: { scope: 'read', module: 'lab_equipment', idempotent: false, handler: { op: 'list', resource: `equipment/${sub}`, nested: 'many' } },
    });
    expect(router.match('POST', `/v1/equipment/e1/${sub}`)).toMatchObject({
      route: { scope: 'write', module: 'lab_equipment', idempotent: true, handler: { op: 'create' } },
    });
    for (const method of ['PATCH', 'PUT']) {
      expect(router.match(method, `/v1/equipment/e1/${sub}/s1`)).toMatchObject({
        params: { id: 'e1', sub_id: 's1' },
        route: { scope: 'write', module: 'lab_equipment', idempotent: false },
      });
    }
    expect(router.match('DELETE', `/v1/equipment/e1/${sub}/s1`)).toEqual({ kind: 'method_not_allowed', allowed: ['PATCH', 'PUT'] });
  });

  it('routes the remote link without idempotency handling', () => {
    for (const method of ['GET', 'POST', 'PUT', 'PATCH', 'DELETE']) {
      expect(router.match(method, '/v1/equipment/e1/remote')).toMatchObject({
        route: { module: 'lab_equipment', idempotent: false, handler: { resource: 'equipment/remote', nested: 'one' } },
      });
    }
  });

  it('every equipment route needs the module', () => {
    const equipmentRoutes = ROUTES.filter((r) => r.path.startsWith('/v1/equipment'));
    expect(equipmentRoutes.length).toBe(6 + 4 * 4 + 5);
    for (const r of equipmentRoutes) expect(r.module).toBe('lab_equipment');
  });

  it('documents the nested paths with their parameters', () => {
    const doc = openApiDocument(ROUTES) as { paths: Record<string, Record<string, { parameters: { name: string }[] }>> };
    const patch = doc.paths['/v1/equipment/{id}/usage/{sub_id}']!.patch!;
    expect(patch.parameters.map((p) => p.name)).toEqual(['id', 'sub_id']);
    expect(doc.paths['/v1/equipment/{id}/remote']!.delete).toBeDefined();
  });
});
