/**
 * Every create answers the Location of what it made, and reading that Location
 * answers the same resource: generated clients and integrators follow it
 * instead of building item paths themselves. (Generic record creates are
 * covered in records.e2e; every answer through `call` is also checked to carry
 * a Location wherever the document states one.)
 */
import { randomUUID } from 'node:crypto';
import { startStack, type Stack } from '@lab/testing';
import { call } from './http';

let stack: Stack;
let org: string;
let key: string;

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'notebook', 'audit', 'webhooks', 'orders', 'jobs', 'telemetry'] });
  org = (await stack.admin.createOrg({ modules: ['sample_intake', 'analytics_qc'] })).id;
  key = (await stack.admin.createApiKey(org, { scopes: ['*'] })).token;
}, 60_000);

afterAll(async () => {
  await stack?.stop();
});

/** Creates, follows Location, and answers both bodies' data. */
async function createAndFollow(path: string, body: unknown, token: string, idField = 'id') {
  const made = await call(stack.url, 'POST', path, { token, body });
  if (made.status !== 201 && made.status !== 202) throw new Error(`POST ${path} answered ${made.status}: ${made.text}`);
  const id = made.body.data[idField] as string;
  const location = made.headers.get('location');
  expect(location).toBe(`${path}/${id}`);
  const read = await call(stack.url, 'GET', location!, { token });
  expect(read.status).toBe(200);
  expect(read.body.data[idField]).toBe(id);
  return { made: made.body.data, read: read.body.data };
}

describe('the management API', () => {
  const operator = () => stack.operatorToken;

  it('answers Location for an organisation, a user and an OAuth client', async () => {
    await createAndFollow('/admin/v1/orgs', { name: `located ${randomUUID()}` }, operator());
    await createAndFollow('/admin/v1/users', { email: `located-${randomUUID()}@example.org` }, operator());
    await createAndFollow('/admin/v1/oauth-clients', { name: 'located client', redirect_uris: ['https://app.example.org/cb'] }, operator(), 'client_id');
  });

  it('answers Location for a webhook subscription and an inbound endpoint', async () => {
    const sub = await createAndFollow(`/admin/v1/orgs/${org}/webhook-subscriptions`, { url: 'https://hooks.example.org/located', events: ['*'] }, operator());
    expect(sub.read.url).toBe('https://hooks.example.org/located');
    await createAndFollow(`/admin/v1/orgs/${org}/inbound-endpoints`, {}, operator());
  });
});

const labOrder = () => ({
  external_order_number: `LIS-${randomUUID()}`,
  requester: { name: 'Dr. Ward', organisation: 'Ward 7' },
  priority: 'routine',
  samples: [{ name: `tube ${randomUUID()}`, type: 'serum' }],
});

describe('the public API', () => {
  it('answers Location for a lab order and for an accepted job', async () => {
    await createAndFollow('/v1/lab-orders', labOrder(), key);
    const experiment = await call(stack.url, 'POST', '/v1/experiments', { token: key, body: { title: 'for a job' } });
    const job = await createAndFollow('/v1/jobs', { job_type: 'experiment_entry_pdf', input: { entry_id: experiment.body.data.id } }, key);
    expect(job.read.job_type).toBe('experiment_entry_pdf');
  });

  it('answers Location for an instrument result and for the heartbeat that registers a connector, not for a later one', async () => {
    const device = await call(stack.url, 'POST', '/v1/devices', { token: key, body: { name: 'balance', identifier: `dev-${randomUUID()}` } });
    const result = await createAndFollow('/v1/results', { device_id: device.body.data.id, values: [{ name: 'mass', value: 1.25, unit: 'g' }] }, key);
    expect(result.read.device_id).toBe(device.body.data.id);
    const heartbeat = { name: `pc-${randomUUID()}`, version: '1.0', devices: [{ identifier: `c-${randomUUID()}`, name: 'X' }] };
    await createAndFollow('/v1/connectors', heartbeat, key);
    const again = await call(stack.url, 'POST', '/v1/connectors', { token: key, body: heartbeat });
    expect([again.status, again.headers.get('location')]).toEqual([200, null]);
  });

  it('answers the same Location when a keyed create is replayed', async () => {
    const headers = { 'idempotency-key': randomUUID() };
    const body = labOrder();
    const first = await call(stack.url, 'POST', '/v1/lab-orders', { token: key, body, headers });
    const again = await call(stack.url, 'POST', '/v1/lab-orders', { token: key, body, headers });
    expect(again.headers.get('idempotent-replay')).toBe('true');
    expect(again.headers.get('location')).toBe(first.headers.get('location'));
    expect(first.headers.get('location')).toBe(`/v1/lab-orders/${first.body.data.id}`);
  });
});
