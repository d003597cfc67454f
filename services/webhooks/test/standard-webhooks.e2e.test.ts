import { createHmac, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { startStack, type Stack } from '@lab/testing';
import { call } from '../../gateway/test/http';
import { eventually, Receiver, type Received } from './receiver';

// Subscriptions signing by Standard Webhooks, through the gateway to real
// receivers, verified with the specification's reference library.
process.env.LAB_WEBHOOKS_ALLOW_PRIVATE_NETWORKS = 'true';
process.env.LAB_WEBHOOKS_RETRY_DELAYS_MS = '100';
process.env.LAB_WEBHOOKS_POLL_MS = '50';

let stack: Stack;
let org: string;
let token: string;
const receivers: Receiver[] = [];

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'notebook', 'audit', 'webhooks'] });
  org = (await stack.admin.createOrg()).id;
  token = (await stack.admin.createApiKey(org, { scopes: ['write'] })).token;
});

afterAll(async () => {
  for (const r of receivers) await r.stop();
  await stack?.stop();
});

const admin = (method: string, path: string, body?: unknown) => call(stack.url, method, `/admin/v1/orgs/${org}${path}`, { token: stack.operatorToken, body });

async function receiver(answer?: (n: number) => number): Promise<Receiver> {
  const r = await new Receiver(answer).start();
  receivers.push(r);
  return r;
}

/** A sample whose creation is delivered; its deliveries are found by its id. */
async function sample(name: string): Promise<string> {
  const s = await call(stack.url, 'POST', '/v1/samples', { token, body: { name } });
  expect(s.status).toBe(201);
  return s.body.data.id as string;
}

const deliveriesOf = (r: Receiver, sampleId: string) => r.requests.filter((x) => x.body.data?.id === sampleId);

/** The Standard Webhooks headers of a received delivery, as the library takes them. */
const swHeaders = (r: Received) => ({
  'webhook-id': String(r.headers['webhook-id']),
  'webhook-timestamp': String(r.headers['webhook-timestamp']),
  'webhook-signature': String(r.headers['webhook-signature']),
});

/** true when the reference library accepts the delivery with `secret`. */
function verifies(secret: string, raw: Buffer | string, headers: Record<string, string>): boolean {
  try {
    new Webhook(secret).verify(raw, headers);
    return true;
  } catch {
    return false;
  }
}

const STANDARD_SECRET = /^whsec_[A-Za-z0-9+/]{43}=$/;
const newStandardSecret = (bytes = 32) => `whsec_${randomBytes(bytes).toString('base64')}`;

test('deliveries verify with the reference library, a retry keeps webhook-id, forgeries fail', async () => {
  // the first attempt is refused: the retry is a second signing of the same delivery
  const r = await receiver((n) => (n === 1 ? 500 : 200));
  const created = await admin('POST', '/webhook-subscriptions', { url: r.url, events: ['sample.created'], signature_scheme: 'standard-webhooks' });
  expect(created.status).toBe(201);
  const sub = created.body.data;
  expect(sub).toEqual({
    id: expect.any(String),
    url: r.url,
    events: ['sample.created'],
    secret: expect.any(String),
    active: true,
    signature_scheme: 'standard-webhooks',
  });
  expect(sub.secret).toMatch(STANDARD_SECRET);
  expect(Buffer.from(sub.secret.slice('whsec_'.length), 'base64')).toHaveLength(32);
  const read = await admin('GET', `/webhook-subscriptions/${sub.id}`);
  expect(read.body.data.signature_scheme).toBe('standard-webhooks');
  expect(read.text).not.toContain(sub.secret);

  const id = await sample('standard');
  const [first, second] = await eventually(() => {
    const d = deliveriesOf(r, id);
    return d.length >= 2 ? d : undefined;
  });
  for (const d of [first!, second!]) {
    expect(d.headers['webhook-id']).toBe(d.body.id);
    expect(d.headers['x-service-delivery']).toBe(d.body.id);
    expect(d.headers['x-service-signature']).toBeUndefined();
    expect(d.headers['webhook-timestamp']).toMatch(/^\d+$/);
    expect(d.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/);
    expect(new Webhook(sub.secret).verify(d.raw, swHeaders(d))).toEqual(d.body);
  }
  expect(second!.headers['webhook-id']).toBe(first!.headers['webhook-id']);

  const d = second!;
  const h = swHeaders(d);
  const now = Math.floor(Date.now() / 1000);
  expect(verifies(sub.secret, Buffer.concat([d.raw, Buffer.from(' ')]), h)).toBe(false); // changed body
  expect(verifies(sub.secret, d.raw.toString().replace('"standard"', '"standarD"'), h)).toBe(false); // changed body
  expect(verifies(sub.secret, d.raw, { ...h, 'webhook-id': randomUUID() })).toBe(false); // changed id
  // changed timestamp: one second off the signed one (the test's own clock could be that very second)
  expect(verifies(sub.secret, d.raw, { ...h, 'webhook-timestamp': String(Number(h['webhook-timestamp']) - 1) })).toBe(false);
  expect(verifies(newStandardSecret(), d.raw, h)).toBe(false); // wrong secret
  // signed correctly with the secret, but 400 seconds ago: beyond the 5 minutes' tolerance
  const old = new Webhook(sub.secret).sign(h['webhook-id'], new Date((now - 400) * 1000), d.raw);
  expect(verifies(sub.secret, d.raw, { ...h, 'webhook-timestamp': String(now - 400), 'webhook-signature': old })).toBe(false);
  // the same, within the tolerance: what the library accepts (the check above fails for the age alone)
  const recent = new Webhook(sub.secret).sign(h['webhook-id'], new Date((now - 200) * 1000), d.raw);
  expect(verifies(sub.secret, d.raw, { ...h, 'webhook-timestamp': String(now - 200), 'webhook-signature': recent })).toBe(true);
});

test('during a rotation old and new secret both verify; a redelivery keeps webhook-id and verifies', async () => {
  const r = await receiver();
  const sub = (await admin('POST', '/webhook-subscriptions', { url: r.url, events: ['sample.created'], signature_scheme: 'standard-webhooks' })).body.data;
  const rotated = await admin('POST', `/webhook-subscriptions/${sub.id}/rotate-secret`);
  expect(rotated.status).toBe(200);
  const newSecret: string = rotated.body.data.secret;
  expect(newSecret).toMatch(STANDARD_SECRET);
  expect(newSecret).not.toBe(sub.secret);

  const id = await sample('rotated');
  const during = await eventually(() => deliveriesOf(r, id)[0]);
  expect(String(during.headers['webhook-signature']).split(' ')).toHaveLength(2);
  expect(verifies(newSecret, during.raw, swHeaders(during))).toBe(true);
  expect(verifies(sub.secret, during.raw, swHeaders(during))).toBe(true);
  expect(verifies(newStandardSecret(), during.raw, swHeaders(during))).toBe(false);

  const deliveries = `/webhook-subscriptions/${sub.id}/deliveries`;
  await eventually(async () => {
    const d = (await admin('GET', deliveries)).body.data.find((x: { id: string }) => x.id === during.body.id);
    return d?.status === 'delivered' ? d : undefined;
  });
  expect((await admin('POST', `${deliveries}/${during.body.id}/redeliver`)).status).toBe(202);
  const again = await eventually(() => deliveriesOf(r, id)[1]);
  expect(again.headers['webhook-id']).toBe(during.headers['webhook-id']);
  expect(again.body.id).toBe(during.body.id);
  // signed at its own sending, over its own bytes (delivered_at is the attempt's)
  expect(Number(again.headers['webhook-timestamp'])).toBeGreaterThanOrEqual(Number(during.headers['webhook-timestamp']));
  expect(verifies(newSecret, again.raw, swHeaders(again))).toBe(true);
  expect(verifies(sub.secret, again.raw, swHeaders(again))).toBe(true);
});

test('the scheme is validated, chosen on create, shown on read and changed by an update', async () => {
  const url = 'https://hooks.example/in';
  const refused = async (body: Record<string, unknown>, path: string) => {
    const a = await admin('POST', '/webhook-subscriptions', { url, events: ['*'], ...body });
    expect([a.status, a.body.error.code, a.body.error.details.fields.map((f: { path: string }) => f.path)]).toEqual([400, 'validation_failed', [path]]);
  };
  await refused({ signature_scheme: 'svix' }, 'signature_scheme');
  await refused({ signature_scheme: 1 }, 'signature_scheme');
  // a Standard Webhooks secret is whsec_ and the base64 of 24 bytes or more
  await refused({ signature_scheme: 'standard-webhooks', secret: 'a-secret-of-sixteen-plus' }, 'secret');
  await refused({ signature_scheme: 'standard-webhooks', secret: newStandardSecret(16) }, 'secret');
  await refused({ signature_scheme: 'standard-webhooks', secret: newStandardSecret(32).replace('whsec_', 'whsec_!') }, 'secret');
  const own = newStandardSecret(24);
  const mine = await admin('POST', '/webhook-subscriptions', { url, events: ['*'], signature_scheme: 'standard-webhooks', secret: own });
  expect([mine.status, mine.body.data.secret]).toEqual([201, own]);

  // the default: the spec's scheme, unchanged
  const r = await receiver();
  const sub = (await admin('POST', '/webhook-subscriptions', { url: r.url, events: ['sample.created'] })).body.data;
  expect(sub.signature_scheme).toBe('x-service-signature');
  expect((await admin('GET', `/webhook-subscriptions/${sub.id}`)).body.data.signature_scheme).toBe('x-service-signature');
  const bad = await admin('PATCH', `/webhook-subscriptions/${sub.id}`, { signature_scheme: 'standard' });
  expect([bad.status, bad.body.error.details.fields[0].path]).toEqual([400, 'signature_scheme']);

  // to standard-webhooks: the default scheme's secret is no base64 key, so a new one is drawn and shown once
  const switched = await admin('PATCH', `/webhook-subscriptions/${sub.id}`, { signature_scheme: 'standard-webhooks' });
  expect(switched.status).toBe(200);
  expect(switched.body.data).toMatchObject({ signature_scheme: 'standard-webhooks', secret: expect.stringMatching(STANDARD_SECRET) });
  const standardSecret: string = switched.body.data.secret;
  expect((await admin('GET', `/webhook-subscriptions/${sub.id}`)).body.data).not.toHaveProperty('secret');
  const s1 = await sample('switched');
  const d1 = await eventually(() => deliveriesOf(r, s1)[0]);
  expect(verifies(standardSecret, d1.raw, swHeaders(d1))).toBe(true);
  expect(verifies(sub.secret, d1.raw, swHeaders(d1))).toBe(false);

  // and back: that secret fits the default scheme too (its characters are the key), so it stays
  const back = await admin('PATCH', `/webhook-subscriptions/${sub.id}`, { signature_scheme: 'x-service-signature' });
  expect(back.status).toBe(200);
  expect(back.body.data.signature_scheme).toBe('x-service-signature');
  expect(back.body.data).not.toHaveProperty('secret');
  const s2 = await sample('switched back');
  const d2 = await eventually(() => deliveriesOf(r, s2)[0]);
  expect(d2.headers['webhook-signature']).toBeUndefined();
  const m = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(String(d2.headers['x-service-signature']))!;
  expect(timingSafeEqual(createHmac('sha256', standardSecret).update(`${m[1]}.`).update(d2.raw).digest(), Buffer.from(m[2]!, 'hex'))).toBe(true);
});
