import { openApiDocument } from '../src/openapi';
import { ROUTES } from '../src/routes';

// How the gateway matches a request against this table: services/gateway/test/routes.unit.test.ts.
describe('route table', () => {
  it('has one route per method and path', () => {
    const keys = ROUTES.map((r) => `${r.method} ${r.path}`);
    expect(new Set(keys).size).toBe(keys.length);
  });
});

describe('equipment routes', () => {
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
