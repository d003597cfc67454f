import { randomUUID } from 'node:crypto';
import { startStack, type Stack } from '@lab/testing';
import { call } from './http';

let stack: Stack;
let key: string;
let otherOrgKey: string;
let noModuleKey: string;

const api = (method: string, path: string, token: string, body?: unknown, headers?: Record<string, string>) =>
  call(stack.url, method, path, { token, body, headers });

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'audit', 'equipment'] });
  const { admin } = stack;
  const org = await admin.createOrg({ modules: ['lab_equipment'] });
  const other = await admin.createOrg({ modules: ['lab_equipment'] });
  const bare = await admin.createOrg();
  key = (await admin.createApiKey(org.id, { scopes: ['read', 'write'] })).token;
  otherOrgKey = (await admin.createApiKey(other.id, { scopes: ['read', 'write'] })).token;
  noModuleKey = (await admin.createApiKey(bare.id, { scopes: ['admin'] })).token;
});

afterAll(async () => {
  await stack?.stop();
});

const newEquipment = async (name = 'HPLC') => {
  const r = await api('POST', '/v1/equipment', key, { name });
  expect(r.status).toBe(201);
  return r.body.data.id as string;
};

describe('module lab_equipment', () => {
  it('answers 403 module_not_enabled on every equipment route without the module', async () => {
    const id = randomUUID();
    const paths: [string, string][] = [
      ['GET', '/v1/equipment'],
      ['POST', '/v1/equipment'],
      ['GET', `/v1/equipment/${id}`],
      ['GET', `/v1/equipment/${id}/usage`],
      ['POST', `/v1/equipment/${id}/maintenance`],
      ['PATCH', `/v1/equipment/${id}/calibrations/${id}`],
      ['PUT', `/v1/equipment/${id}/qualifications/${id}`],
      ['GET', `/v1/equipment/${id}/remote`],
      ['PUT', `/v1/equipment/${id}/remote`],
      ['DELETE', `/v1/equipment/${id}/remote`],
    ];
    for (const [method, path] of paths) {
      const r = await api(method, path, noModuleKey, method === 'GET' || method === 'DELETE' ? undefined : {});
      expect([method, path, r.status, r.body.error.code]).toEqual([method, path, 403, 'module_not_enabled']);
    }
  });

  it('serves equipment with the module', async () => {
    const id = await newEquipment('Balance');
    const r = await api('GET', `/v1/equipment/${id}`, key);
    expect(r.status).toBe(200);
    expect(r.body.data).toMatchObject({ id, name: 'Balance', status: 'available' });
  });
});

describe('equipment sub-resources', () => {
  it('creates, lists and patches usage sessions; a second open session is 409 usage_in_progress', async () => {
    const id = await newEquipment('Centrifuge');
    const started = await api('POST', `/v1/equipment/${id}/usage`, key, { purpose: 'spin', settings: { rpm: 3000 } });
    expect(started.status).toBe(201);
    expect(started.body.data).toMatchObject({ equipment_id: id, purpose: 'spin', ended_at: null, settings: { rpm: 3000 } });
    const sessionId = started.body.data.id as string;

    const second = await api('POST', `/v1/equipment/${id}/usage`, key, {});
    expect(second.status).toBe(409);
    expect(second.body.error.code).toBe('usage_in_progress');

    const endedAt = new Date(Date.parse(started.body.data.started_at) + 30 * 60_000).toISOString();
    const done = await api('PATCH', `/v1/equipment/${id}/usage/${sessionId}`, key, { ended_at: endedAt, notes: 'ok' });
    expect(done.status).toBe(200);
    expect(done.body.data).toMatchObject({ id: sessionId, duration_minutes: 30, notes: 'ok' });

    const listed = await api('GET', `/v1/equipment/${id}/usage`, key);
    expect(listed.status).toBe(200);
    expect(listed.body.data.map((s: { id: string }) => s.id)).toEqual([sessionId]);
    expect(listed.body.pagination).toEqual({ limit: 100, offset: 0, total: 1 });

    const bad = await api('PATCH', `/v1/equipment/${id}/usage/${sessionId}`, key, { ended_at: '2000-01-01T00:00:00Z' });
    expect(bad.status).toBe(400);
  });

  it('bounds the list limit (default 100, max 500) and checks from/to', async () => {
    const id = await newEquipment();
    expect((await api('GET', `/v1/equipment/${id}/maintenance?limit=500`, key)).body.pagination.limit).toBe(500);
    for (const q of ['limit=501', 'limit=0', 'offset=-1', 'from=yesterday']) {
      const r = await api('GET', `/v1/equipment/${id}/maintenance?${q}`, key);
      expect([q, r.status, r.body.error.code]).toEqual([q, 400, 'validation_failed']);
    }
    const log = await api('POST', `/v1/equipment/${id}/maintenance`, key, { maintenance_type: 'inspection', completed_date: '2024-06-10' });
    expect(log.status).toBe(201);
    const inRange = await api('GET', `/v1/equipment/${id}/maintenance?from=2024-06-01&to=2024-07-01`, key);
    expect(inRange.body.data).toHaveLength(1);
    const outOfRange = await api('GET', `/v1/equipment/${id}/maintenance?from=2024-07-01`, key);
    expect(outOfRange.body.data).toHaveLength(0);
    expect((await api('GET', `/v1/equipment/${id}`, key)).body.data.last_maintenance_date).toBe('2024-06-10');
  });

  it('replays an idempotent sub-resource POST and refuses the key with another payload', async () => {
    const id = await newEquipment();
    const headers = { 'idempotency-key': `cal-${randomUUID()}` };
    const first = await api('POST', `/v1/equipment/${id}/calibrations`, key, { standard: 'A', ok: true }, headers);
    expect(first.status).toBe(201);
    expect(first.body.data).toMatchObject({ equipment_id: id, standard: 'A', ok: true });
    const replay = await api('POST', `/v1/equipment/${id}/calibrations`, key, { standard: 'A', ok: true }, headers);
    expect(replay.status).toBe(201);
    expect(replay.headers.get('idempotent-replay')).toBe('true');
    expect(replay.body).toEqual(first.body);
    const conflict = await api('POST', `/v1/equipment/${id}/calibrations`, key, { standard: 'B' }, headers);
    expect(conflict.status).toBe(409);
    expect(conflict.body.error).toBe('idempotency_key_conflict');
    const listed = await api('GET', `/v1/equipment/${id}/calibrations`, key);
    expect(listed.body.pagination.total).toBe(1);
  });

  it('does not handle Idempotency-Key on PATCH/PUT of a sub-resource', async () => {
    const id = await newEquipment();
    const q = await api('POST', `/v1/equipment/${id}/qualifications`, key, { phase: 'IQ' });
    const path = `/v1/equipment/${id}/qualifications/${q.body.data.id}`;
    const headers = { 'idempotency-key': `q-${randomUUID()}` };
    const a = await api('PUT', path, key, { phase: 'OQ' }, headers);
    const b = await api('PUT', path, key, { phase: 'PQ' }, headers);
    expect([a.status, b.status]).toEqual([200, 200]);
    expect(b.headers.get('idempotent-replay')).toBeNull();
    expect(b.body.data.phase).toBe('PQ');
  });

  it('answers 400 for a calibration body that is not an object', async () => {
    const id = await newEquipment();
    const r = await api('POST', `/v1/equipment/${id}/calibrations`, key, [1, 2]);
    expect(r.status).toBe(400);
  });

  it('answers 404 for non-UUID ids, unknown equipment and equipment of another organisation', async () => {
    const id = await newEquipment();
    expect((await api('GET', '/v1/equipment/not-a-uuid/usage', key)).status).toBe(404);
    expect((await api('PATCH', `/v1/equipment/${id}/usage/not-a-uuid`, key, {})).status).toBe(404);
    expect((await api('GET', `/v1/equipment/${randomUUID()}/usage`, key)).status).toBe(404);
    expect((await api('GET', `/v1/equipment/${id}/usage`, otherOrgKey)).status).toBe(404);
    expect((await api('POST', `/v1/equipment/${id}/maintenance`, otherOrgKey, { maintenance_type: 'repair' })).status).toBe(404);
    expect((await api('PUT', `/v1/equipment/${id}/remote`, otherOrgKey, { url: 'https://x.example.org' })).status).toBe(404);
    const s = await api('POST', `/v1/equipment/${id}/usage`, key, {});
    const foreign = await api('PATCH', `/v1/equipment/${id}/usage/${s.body.data.id}`, otherOrgKey, { notes: 'x' });
    expect(foreign.status).toBe(404);
  });
});

describe('equipment remote link', () => {
  it('GET 404 -> PUT -> PATCH -> DELETE 204', async () => {
    const id = await newEquipment('Spectrometer');
    const path = `/v1/equipment/${id}/remote`;
    const none = await api('GET', path, key);
    expect(none.status).toBe(404);
    expect(none.body.error.code).toBe('not_found');
    expect((await api('PATCH', path, key, { label: 'x' })).status).toBe(404);

    const put = await api('PUT', path, key, { url: 'https://remote.example.org/spec', protocol: 'vnc', label: 'Spectro' });
    expect(put.status).toBe(200);
    expect(put.body.data).toMatchObject({ equipment_id: id, url: 'https://remote.example.org/spec', protocol: 'vnc', enabled: true });

    const patched = await api('PATCH', path, key, { enabled: false });
    expect(patched.status).toBe(200);
    expect(patched.body.data).toMatchObject({ id: put.body.data.id, label: 'Spectro', enabled: false });
    expect((await api('GET', path, key)).body.data).toEqual(patched.body.data);

    const posted = await api('POST', path, key, { url: 'http://remote.example.org/v2' });
    expect(posted.status).toBe(201);
    expect(posted.body.data).toMatchObject({ id: put.body.data.id, url: 'http://remote.example.org/v2' });
    expect((await api('PUT', path, key, { url: 'javascript:alert(1)' })).status).toBe(400);

    const del = await api('DELETE', path, key);
    expect(del.status).toBe(204);
    expect(del.text).toBe('');
    expect((await api('GET', path, key)).status).toBe(404);
    expect((await api('DELETE', path, key)).status).toBe(404);
  });
});
