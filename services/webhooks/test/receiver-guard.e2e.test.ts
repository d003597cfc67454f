import { startStack, type Stack } from '@lab/testing';
import { call } from '../../gateway/test/http';

// Private receivers were accepted at registration and only blocked at every
// delivery: now the management API refuses them, for a new subscription and a
// changed url alike, and changes nothing.
process.env.LAB_WEBHOOKS_ALLOW_PRIVATE_NETWORKS = 'false';

let stack: Stack;
let org: string;

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'audit', 'webhooks'] });
  org = (await stack.admin.createOrg()).id;
});

afterAll(async () => {
  await stack?.stop();
});

const admin = (method: string, path: string, body?: unknown) => call(stack.url, method, `/admin/v1/orgs/${org}${path}`, { token: stack.operatorToken, body });

test('refuses loopback, private, link-local and metadata receivers at registration and on change', async () => {
  for (const url of ['http://127.0.0.1:9/hook', 'http://localhost:8080/hook', 'http://[::1]/hook', 'http://169.254.169.254/latest', 'https://10.0.0.5/hook']) {
    const r = await admin('POST', '/webhook-subscriptions', { url, events: ['sample.created'] });
    expect([url, r.status, r.body.error.code, r.body.error.details.field]).toEqual([url, 400, 'validation_failed', 'url']);
  }
  const listed = await admin('GET', '/webhook-subscriptions');
  expect(listed.body.pagination.total).toBe(0);

  // a public address is taken (nothing is sent until an event), and cannot be moved to a private one
  const made = await admin('POST', '/webhook-subscriptions', { url: 'https://93.184.216.34/hook', events: ['sample.created'] });
  expect(made.status).toBe(201);
  const moved = await admin('PATCH', `/webhook-subscriptions/${made.body.data.id}`, { url: 'http://127.0.0.1:9/hook' });
  expect([moved.status, moved.body.error.details.field]).toEqual([400, 'url']);
  expect((await admin('GET', `/webhook-subscriptions/${made.body.data.id}`)).body.data.url).toBe('https://93.184.216.34/hook');
});
