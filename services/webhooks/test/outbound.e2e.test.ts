import { createHmac, timingSafeEqual } from 'node:crypto';
import { startStack, type Stack } from '@lab/testing';
import { call } from '../../gateway/test/http';
import { eventually, Receiver, type Received } from './receiver';

// the webhooks service reads these when the stack starts it
process.env.LAB_WEBHOOKS_ALLOW_PRIVATE_NETWORKS = 'true';
process.env.LAB_WEBHOOKS_RETRY_DELAYS_MS = '100';
process.env.LAB_WEBHOOKS_POLL_MS = '50';

let stack: Stack;
let org: string;
let token: string;
const receivers: Receiver[] = [];

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'notebook', 'equipment', 'audit', 'webhooks'] });
  org = (await stack.admin.createOrg({ modules: ['lab_equipment'] })).id;
  token = (await stack.admin.createApiKey(org, { scopes: ['write'] })).token;
});

afterAll(async () => {
  for (const r of receivers) await r.stop();
  await stack?.stop();
});

const admin = (method: string, path: string, body?: unknown) => call(stack.url, method, `/admin/v1/orgs/${org}${path}`, { token: stack.operatorToken, body });

function verifies(r: Received, key: string): boolean {
  const m = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(String(r.headers['x-service-signature']));
  if (!m) return false;
  return timingSafeEqual(createHmac('sha256', key).update(`${m[1]}.`).update(r.raw).digest(), Buffer.from(m[2]!, 'hex'));
}

test('sample, experiment and equipment events arrive signed with their data fields', async () => {
  const r = await new Receiver().start();
  receivers.push(r);
  const created = await admin('POST', '/webhook-subscriptions', { url: r.url, events: ['sample.*', 'experiment.created', 'equipment.*'] });
  expect(created.status).toBe(201);
  const sub = created.body.data;
  expect(sub).toEqual({
    id: expect.any(String),
    url: r.url,
    events: ['sample.*', 'experiment.created', 'equipment.*'],
    secret: expect.any(String),
    active: true,
    signature_scheme: 'x-service-signature',
  });

  const sample = (await call(stack.url, 'POST', '/v1/samples', { token, body: { name: 'S-1', type: 'blood' } })).body.data;
  const exp = (await call(stack.url, 'POST', '/v1/experiments', { token, body: { title: 'E-1' } })).body.data;
  const eq = (await call(stack.url, 'POST', '/v1/equipment', { token, body: { name: 'HPLC' } })).body.data;
  const usage = await call(stack.url, 'POST', `/v1/equipment/${eq.id}/usage`, { token, body: { purpose: 'run' } });
  expect(usage.status).toBe(201);

  const byEvent = await eventually(() => {
    const m = new Map(r.requests.map((x) => [x.body.event as string, x]));
    return m.has('sample.created') && m.has('experiment.created') && m.has('equipment.usage.started') ? m : undefined;
  });
  const s = byEvent.get('sample.created')!;
  expect(s.body).toMatchObject({ event: 'sample.created', org_id: org, id: s.headers['x-service-delivery'], delivered_at: expect.any(String) });
  expect(s.body.data).toMatchObject({ id: sample.id, name: 'S-1', type: 'blood', status: expect.any(String), created_at: expect.any(String) });
  expect(s.body.data).toHaveProperty('storage_location_id');
  const e = byEvent.get('experiment.created')!;
  expect(e.body.data).toMatchObject({ id: exp.id, display_id: exp.display_id, title: 'E-1', status: 'draft', created_at: expect.any(String) });
  for (const k of ['project_id', 'author_id']) expect(e.body.data).toHaveProperty(k);
  const u = byEvent.get('equipment.usage.started')!;
  expect(u.body.data).toMatchObject({ equipment_id: eq.id, purpose: 'run', started_at: expect.any(String) });
  for (const x of byEvent.values()) {
    expect(verifies(x, sub.secret)).toBe(true);
    expect(x.headers['x-service-event']).toBe(x.body.event);
  }

  const list = await eventually(async () => {
    const l = await admin('GET', `/webhook-subscriptions/${sub.id}/deliveries`);
    return l.body.data.filter((d: { status: string }) => d.status === 'delivered').length >= 3 ? l : undefined;
  });
  expect(list.status).toBe(200);
  expect(list.body.data[0]).toEqual(
    expect.objectContaining({
      id: expect.any(String),
      event: expect.any(String),
      status: 'delivered',
      attempts: 1,
      last_status_code: 200,
      next_attempt_at: null,
      delivered_at: expect.any(String),
    }),
  );
});

test('management validation and lookups', async () => {
  expect((await admin('POST', '/webhook-subscriptions', { url: 'ftp://x.example/', events: ['*'] })).status).toBe(400);
  expect((await admin('POST', '/webhook-subscriptions', { url: 'https://x.example/', events: ['audit.record'] })).status).toBe(400);
  expect((await admin('POST', '/webhook-subscriptions', { url: 'https://x.example/', events: ['*'], extra: 1 })).status).toBe(400);
  expect((await admin('GET', `/webhook-subscriptions/01a200de-a88e-7799-907c-74f58d662787/deliveries`)).status).toBe(404);
  const noToken = await call(stack.url, 'POST', `/admin/v1/orgs/${org}/webhook-subscriptions`, { body: { url: 'https://x.example/', events: ['*'] } });
  expect(noToken.status).toBe(401);
});
