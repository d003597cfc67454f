import { EQUIPMENT_SUBRESOURCES, ROUTES } from '@lab/http-api';
import { Router } from '../src/router';

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
});
