import { strict as assert } from 'node:assert';
import { createHmac, randomUUID, timingSafeEqual } from 'node:crypto';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { startStack, type Stack } from '@lab/testing';
import { eventually, Receiver, type Received } from '../../webhooks/test/receiver';
import { call } from './http';
import { authorize, token } from './oauth-flow';

/**
 * The management contract's "Reading and undoing what was made", end to end
 * over HTTP: every list, read, change and delete, rotation with its overlap,
 * redelivery to a real receiver, and the refusals (404 outside the organisation,
 * 409 while in use, 400 in plain words, never a 500).
 */

// the webhooks service reads these when the stack starts it
process.env.LAB_WEBHOOKS_ALLOW_PRIVATE_NETWORKS = 'true';
process.env.LAB_WEBHOOKS_RETRY_DELAYS_MS = '100';
process.env.LAB_WEBHOOKS_POLL_MS = '50';

let stack: Stack;
let org: string;
let otherOrg: string;
let writeKey: string;
const receivers: Receiver[] = [];

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'notebook', 'telemetry', 'webhooks', 'audit'] });
  org = (await stack.admin.createOrg({ name: 'Reading lab', modules: ['analytics_qc'], rate_limit: { per_minute: 100_000, per_hour: 1_000_000 } })).id;
  otherOrg = (await stack.admin.createOrg({ name: 'Other lab' })).id;
  writeKey = (await stack.admin.createApiKey(org, { scopes: ['write'] })).token;
});

afterAll(async () => {
  for (const r of receivers) await r.stop();
  await stack?.stop();
});

const op = (method: string, path: string, body?: unknown) => call(stack.url, method, `/admin/v1${path}`, { token: stack.operatorToken, body });
const api = (method: string, path: string, body?: unknown, t = writeKey) => call(stack.url, method, path, { token: t, body });

async function receiver(): Promise<Receiver> {
  const r = await new Receiver().start();
  receivers.push(r);
  return r;
}

/** The v1 values of a delivery's signature header, and whether one verifies with `secret`. */
const v1s = (r: Received) =>
  String(r.headers['x-service-signature'])
    .split(',')
    .filter((p) => p.startsWith('v1='))
    .map((p) => p.slice(3));
function signedBy(r: Received, secret: string): boolean {
  const t = /t=(\d+)/.exec(String(r.headers['x-service-signature']))![1];
  const expected = createHmac('sha256', secret).update(`${t}.`).update(r.raw).digest();
  return v1s(r).some((v) => timingSafeEqual(expected, Buffer.from(v, 'hex')));
}

async function sql<T = Record<string, unknown>>(text: string, params: unknown[] = []): Promise<T[]> {
  const db = new pg.Client({ connectionString: stack.databaseUrl });
  await db.connect();
  try {
    return (await db.query(text, params)).rows as T[];
  } finally {
    await db.end();
  }
}

describe('organisations', () => {
  it('lists them a page at a time with limit, offset and total, and reads one', async () => {
    const all = await op('GET', '/orgs?limit=200');
    expect(all.status).toBe(200);
    expect(all.body.pagination).toEqual({ limit: 200, offset: 0, total: expect.any(Number) });
    expect(all.body.data.map((o: { id: string }) => o.id)).toEqual(expect.arrayContaining([org, otherOrg]));
    const total = all.body.pagination.total as number;
    const second = await op('GET', '/orgs?limit=1&offset=1');
    expect(second.body).toEqual({ data: [all.body.data[1]], pagination: { limit: 1, offset: 1, total } });
    expect((await op('GET', '/orgs')).body.pagination.limit).toBe(50);

    const one = await op('GET', `/orgs/${org}`);
    expect(one.status).toBe(200);
    expect(one.body.data).toEqual({
      id: org,
      name: 'Reading lab',
      modules: ['analytics_qc'],
      rate_limit: { per_minute: 100_000, per_hour: 1_000_000 },
      created_at: expect.any(String),
    });
    expect((await op('GET', `/orgs/${randomUUID()}`)).status).toBe(404);
  });

  it.each([
    ['limit=0', 'limit', 'must be at least 1'],
    ['limit=201', 'limit', 'must be at most 200'],
    ['offset=-1', 'offset', 'must be at least 0'],
    ['limit=ten', 'limit', 'must be a number'],
    ['colour=red', 'colour', 'unknown or read-only field'],
  ])('refuses ?%s with 400 naming the field in plain words', async (query, path, message) => {
    const r = await op('GET', `/orgs?${query}`);
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ code: 'validation_failed', details: { field: path, fields: [{ path, message }] } });
  });
});

describe('validation errors of the management API', () => {
  it('say a missing field "is required" and name an unknown key by its path, as /v1 does', async () => {
    const missing = await op('POST', '/orgs', {});
    expect(missing.status).toBe(400);
    expect(missing.body.error.details.fields).toEqual([{ path: 'name', message: 'is required' }]);
    const unknown = await op('POST', `/orgs/${org}/webhook-subscriptions`, { url: 'https://x.example/', events: ['*'], event: 'x' });
    expect(unknown.status).toBe(400);
    expect(unknown.body.error.details.fields).toEqual([{ path: 'event', message: 'unknown or read-only field' }]);
    const user = await op('PUT', `/orgs/${org}/members/${randomUUID()}`, { role: 'researcher', department_id: 'nope' });
    expect(user.body.error.details.fields).toEqual([{ path: 'department_id', message: 'must be a UUID' }]);
    const v1 = await api('POST', '/v1/projects', { description: 'no name' });
    expect(v1.status).toBe(400);
    expect(v1.body.error.details.fields).toEqual([{ path: 'name', message: 'is required' }]);
  });

  it('refuse an unlisted event with the one list of subscribable events in the message', async () => {
    const r = await op('POST', `/orgs/${org}/webhook-subscriptions`, { url: 'https://x.example/', events: ['experiment.deleted'] });
    expect(r.status).toBe(400);
    const message: string = r.body.error.details.fields[0].message;
    for (const e of ['lab_order.created', 'lab_result.released', 'stock_item.*', 'environmental.*', 'experiment.*', '*']) expect(message).toContain(e);
  });
});

describe('departments', () => {
  it('lists them; deleting is refused 409 while a member or a record uses it, and works once none does', async () => {
    const dept = (await op('POST', `/orgs/${org}/departments`, { name: 'Chemistry' })).body.data;
    const spare = (await op('POST', `/orgs/${org}/departments`, { name: 'Spare' })).body.data;
    const list = await op('GET', `/orgs/${org}/departments`);
    expect(list.status).toBe(200);
    expect(list.body.data).toEqual(expect.arrayContaining([{ id: dept.id, org_id: org, name: 'Chemistry', created_at: expect.any(String) }]));
    expect(list.body.pagination).toEqual({ limit: 50, offset: 0, total: list.body.data.length });

    const user = await stack.admin.createUser();
    await stack.admin.putMember(org, user.id, 'researcher', dept.id);
    const byMember = await op('DELETE', `/orgs/${org}/departments/${dept.id}`);
    expect([byMember.status, byMember.body.error.code]).toEqual([409, 'department_in_use']);

    await stack.admin.putMember(org, user.id, 'researcher');
    const sample = (await api('POST', '/v1/samples', { name: 'S-dept', department_id: dept.id })).body.data;
    const byRecord = await op('DELETE', `/orgs/${org}/departments/${dept.id}`);
    expect([byRecord.status, byRecord.body.error.code]).toEqual([409, 'department_in_use']);
    expect(byRecord.body.error.details).toEqual({ records: { samples: 1 } });

    // the other organisation cannot reach it
    expect((await op('DELETE', `/orgs/${otherOrg}/departments/${dept.id}`)).status).toBe(404);
    expect((await api('PATCH', `/v1/samples/${sample.id}`, { department_id: null })).status).toBe(200);
    expect((await op('DELETE', `/orgs/${org}/departments/${dept.id}`)).status).toBe(204);
    expect((await op('DELETE', `/orgs/${org}/departments/${dept.id}`)).status).toBe(404);
    expect((await op('DELETE', `/orgs/${org}/departments/not-a-uuid`)).status).toBe(404);
    const after = (await op('GET', `/orgs/${org}/departments?limit=200`)).body.data.map((d: { id: string }) => d.id);
    expect(after).toContain(spare.id);
    expect(after).not.toContain(dept.id);
    expect((await op('GET', `/orgs/${randomUUID()}/departments`)).status).toBe(404);
  });
});

describe('users, members and tokens', () => {
  it('finds a user by email (any case) with memberships, lists members with role and department, lists tokens without their secret', async () => {
    const email = `Reader.${Date.now()}@Example.test`;
    const user = await stack.admin.createUser({ email, name: 'Reader' });
    const dept = (await op('POST', `/orgs/${org}/departments`, { name: 'Biology' })).body.data;
    await stack.admin.putMember(org, user.id, 'qm', dept.id);

    const found = await op('GET', `/users?email=${encodeURIComponent(email.toLowerCase())}`);
    expect(found.status).toBe(200);
    const view = {
      id: user.id,
      email,
      name: 'Reader',
      created_at: expect.any(String),
      memberships: [{ org_id: org, org_name: 'Reading lab', role: 'qm', department_id: dept.id }],
    };
    expect(found.body).toEqual({ data: [view], pagination: { limit: 50, offset: 0, total: 1 } });
    expect((await op('GET', '/users?email=nobody@example.test')).body).toEqual({ data: [], pagination: { limit: 50, offset: 0, total: 0 } });
    expect((await op('GET', `/users/${user.id}`)).body.data).toEqual(view);
    expect((await op('GET', `/users/${randomUUID()}`)).status).toBe(404);
    expect((await op('GET', '/users?limit=2')).body.data.length).toBeLessThanOrEqual(2);

    const members = (await op('GET', `/orgs/${org}/members?limit=200`)).body;
    expect(members.data).toContainEqual({
      org_id: org,
      user_id: user.id,
      email,
      name: 'Reader',
      role: 'qm',
      department_id: dept.id,
      created_at: expect.any(String),
    });
    expect(members.pagination.total).toBe(members.data.length);
    expect((await op('GET', `/orgs/${otherOrg}/members`)).body.data.map((m: { user_id: string }) => m.user_id)).not.toContain(user.id);

    const key = await stack.admin.createApiKey(org, { name: 'lims', scopes: ['read'], user_id: user.id });
    const pat = await stack.admin.createPat(user.id, { name: 'laptop', scopes: ['read'], org_id: org });
    expect((await api('GET', '/v1/samples', undefined, key.token)).status).toBe(200);
    // last_used_at is written beside the request, not before its answer
    const keys = await eventually(async () => {
      const l = await op('GET', `/orgs/${org}/api-keys?limit=200`);
      return l.body.data.find((k: { id: string; last_used_at: string | null }) => k.id === key.id)?.last_used_at ? l : undefined;
    });
    expect(keys.status).toBe(200);
    const shown = keys.body.data.find((k: { id: string }) => k.id === key.id);
    expect(shown).toEqual({
      id: key.id,
      name: 'lims',
      prefix: expect.any(String),
      scopes: ['read'],
      org_id: org,
      user_id: user.id,
      connector_id: null,
      device_ids: [],
      created_at: expect.any(String),
      last_used_at: expect.any(String),
      expires_at: null,
    });
    expect(key.token.startsWith(shown.prefix)).toBe(true);
    expect(shown.prefix.length).toBeLessThan(key.token.length - 30);
    expect(keys.text).not.toContain(key.token);
    expect(keys.text).not.toContain(key.token.slice(-20));

    const pats = await op('GET', `/users/${user.id}/pats`);
    expect(pats.body).toEqual({
      data: [
        {
          id: pat.id,
          name: 'laptop',
          prefix: pat.token.slice(0, 10),
          scopes: ['read'],
          org_id: org,
          user_id: user.id,
          created_at: expect.any(String),
          last_used_at: null,
          expires_at: null,
        },
      ],
      pagination: { limit: 50, offset: 0, total: 1 },
    });
    expect(pats.text).not.toContain(pat.token);
    expect((await op('GET', `/users/${randomUUID()}/pats`)).status).toBe(404);

    // a revoked token is undone: no longer listed
    expect((await op('DELETE', `/tokens/${pat.id}`)).status).toBe(204);
    expect((await op('GET', `/users/${user.id}/pats`)).body.data).toEqual([]);
    // API keys of one organisation are not listed under another
    expect((await op('GET', `/orgs/${otherOrg}/api-keys`)).body.data.map((k: { id: string }) => k.id)).not.toContain(key.id);
  });
});

describe('environmental points', () => {
  it('lists every point; deleting one without readings removes it, one with readings is deactivated', async () => {
    const unused = (await op('POST', `/orgs/${org}/environmental-points`, { parameter: 'humidity', unit: '%' })).body.data;
    const used = (await op('POST', `/orgs/${org}/environmental-points`, { parameter: 'temperature', unit: 'C', external_code: 'FRIDGE-1', limit_max: 8 })).body
      .data;
    const ingest = await api('POST', '/v1/environmental-readings', { point_id: used.id, value: 4.5 });
    expect(ingest.status).toBe(201);

    const list = await op('GET', `/orgs/${org}/environmental-points?limit=200`);
    expect(list.status).toBe(200);
    expect(list.body.data.map((p: { id: string }) => p.id)).toEqual(expect.arrayContaining([unused.id, used.id]));
    expect(list.body.pagination).toEqual({ limit: 200, offset: 0, total: list.body.data.length });
    expect((await op('GET', `/orgs/${org}/environmental-points?limit=1&offset=1`)).body.data).toEqual([list.body.data[1]]);

    expect((await op('DELETE', `/orgs/${otherOrg}/environmental-points/${unused.id}`)).status).toBe(404);
    expect((await op('DELETE', `/orgs/${org}/environmental-points/${unused.id}`)).status).toBe(204);
    expect((await op('DELETE', `/orgs/${org}/environmental-points/${unused.id}`)).status).toBe(404);

    const kept = await op('DELETE', `/orgs/${org}/environmental-points/${used.id}`);
    expect(kept.status).toBe(200);
    expect(kept.body.data).toMatchObject({ id: used.id, active: false });
    // the readings are still there, new ones are refused for the inactive point
    expect((await api('GET', `/v1/environmental-readings?point_id=${used.id}`)).body.data).toHaveLength(1);
    const refused = await api('POST', '/v1/environmental-readings', { point_id: used.id, value: 5 });
    expect(refused.status).toBe(422);
    expect(JSON.stringify(refused.body)).toContain('point_inactive');
    const ids = (await op('GET', `/orgs/${org}/environmental-points?limit=200`)).body.data.map((p: { id: string }) => p.id);
    expect(ids).toContain(used.id);
    expect(ids).not.toContain(unused.id);
  });
});

describe('webhook subscriptions', () => {
  it('lists, reads and changes them without ever showing the secret, and deletes them', async () => {
    const created = (
      await op('POST', `/orgs/${org}/webhook-subscriptions`, { url: 'https://a.example/hook', events: ['sample.*'], secret: 'a-secret-of-sixteen-plus' })
    ).body.data;
    const list = await op('GET', `/orgs/${org}/webhook-subscriptions`);
    expect(list.status).toBe(200);
    const view = {
      id: created.id,
      url: 'https://a.example/hook',
      events: ['sample.*'],
      active: true,
      disabled_reason: null,
      created_at: expect.any(String),
      updated_at: expect.any(String),
      previous_secret_expires_at: null,
      signature_scheme: 'x-service-signature',
    };
    expect(list.body.data).toContainEqual(view);
    expect(list.text).not.toContain('a-secret-of-sixteen-plus');
    const one = await op('GET', `/orgs/${org}/webhook-subscriptions/${created.id}`);
    expect(one.body.data).toEqual(view);
    expect(one.text).not.toContain('secret"');

    const patched = await op('PATCH', `/orgs/${org}/webhook-subscriptions/${created.id}`, {
      url: 'https://b.example/hook',
      events: ['lab_result.released', 'sample.created'],
      active: false,
    });
    expect(patched.status).toBe(200);
    expect(patched.body.data).toMatchObject({ url: 'https://b.example/hook', events: ['lab_result.released', 'sample.created'], active: false });
    expect((await op('PATCH', `/orgs/${org}/webhook-subscriptions/${created.id}`, { active: true })).body.data.active).toBe(true);

    for (const [body, path, message] of [
      [{}, '', 'nothing to change: give url, events, active or signature_scheme'],
      [{ url: 'ftp://x.example/' }, 'url', 'must be an http(s) URL without credentials'],
      [{ active: 'yes' }, 'active', 'must be a boolean (true or false)'],
      [{ secret: 'x' }, 'secret', 'unknown or read-only field'],
    ] as const) {
      const r = await op('PATCH', `/orgs/${org}/webhook-subscriptions/${created.id}`, body);
      expect([JSON.stringify(body), r.status, r.body.error.details.fields]).toEqual([JSON.stringify(body), 400, [{ path, message }]]);
    }
    expect((await op('PATCH', `/orgs/${org}/webhook-subscriptions/${created.id}`, null)).status).toBe(400);

    // scoped by organisation: the other organisation does not see it
    expect((await op('GET', `/orgs/${otherOrg}/webhook-subscriptions/${created.id}`)).status).toBe(404);
    expect((await op('PATCH', `/orgs/${otherOrg}/webhook-subscriptions/${created.id}`, { active: false })).status).toBe(404);
    expect((await op('DELETE', `/orgs/${otherOrg}/webhook-subscriptions/${created.id}`)).status).toBe(404);
    expect((await op('GET', `/orgs/${otherOrg}/webhook-subscriptions`)).body.data).toEqual([]);

    expect((await op('DELETE', `/orgs/${org}/webhook-subscriptions/${created.id}`)).status).toBe(204);
    expect((await op('GET', `/orgs/${org}/webhook-subscriptions/${created.id}`)).status).toBe(404);
    expect((await op('GET', `/orgs/${org}/webhook-subscriptions/not-a-uuid`)).status).toBe(404);
    expect((await op('GET', `/orgs/${randomUUID()}/webhook-subscriptions`)).status).toBe(404);
  });

  it('rotation: the new secret signs from now on and the old one beside it for 24 hours (two v1 values), then alone', async () => {
    const r = await receiver();
    const sub = (await op('POST', `/orgs/${org}/webhook-subscriptions`, { url: r.url, events: ['sample.created'] })).body.data;
    const rotated = await op('POST', `/orgs/${org}/webhook-subscriptions/${sub.id}/rotate-secret`);
    expect(rotated.status).toBe(200);
    expect(rotated.body.data).toEqual({ secret: expect.stringMatching(/^whsec_/), previous_secret_expires_at: expect.any(String) });
    const newSecret: string = rotated.body.data.secret;
    expect(newSecret).not.toBe(sub.secret);
    const overlapHours = (Date.parse(rotated.body.data.previous_secret_expires_at) - Date.now()) / 3_600_000;
    expect(overlapHours).toBeGreaterThan(23.9);
    expect(overlapHours).toBeLessThanOrEqual(24);
    expect((await op('GET', `/orgs/${org}/webhook-subscriptions/${sub.id}`)).body.data.previous_secret_expires_at).toBe(
      rotated.body.data.previous_secret_expires_at,
    );

    await api('POST', '/v1/samples', { name: 'during the overlap' });
    const during = await eventually(() => r.requests.find((x) => x.body.data.name === 'during the overlap'));
    expect(v1s(during)).toHaveLength(2);
    expect(signedBy(during, newSecret)).toBe(true);
    expect(signedBy(during, sub.secret)).toBe(true);
    // the new secret's signature comes first
    expect(
      createHmac('sha256', newSecret)
        .update(`${/t=(\d+)/.exec(String(during.headers['x-service-signature']))![1]}.`)
        .update(during.raw)
        .digest('hex'),
    ).toBe(v1s(during)[0]);

    // the overlap over: only the new secret signs (a second connection to the schema is needed to move time)
    assert(stack.databaseUrl, 'moving the overlap needs a connection of its own: DATABASE_URL (npm test finds it)');
    await sql(`update webhooks.subscriptions set previous_secret_expires_at = now() - interval '1 second' where id = $1`, [sub.id]);
    await api('POST', '/v1/samples', { name: 'after the overlap' });
    const after = await eventually(() => r.requests.find((x) => x.body.data.name === 'after the overlap'));
    expect(v1s(after)).toHaveLength(1);
    expect(signedBy(after, newSecret)).toBe(true);
    expect(signedBy(after, sub.secret)).toBe(false);
    expect((await op('GET', `/orgs/${org}/webhook-subscriptions/${sub.id}`)).body.data.previous_secret_expires_at).toBeNull();

    expect((await op('POST', `/orgs/${org}/webhook-subscriptions/${sub.id}/rotate-secret`, { secret: 'mine-mine-mine-mine' })).status).toBe(400);
    expect((await op('POST', `/orgs/${otherOrg}/webhook-subscriptions/${sub.id}/rotate-secret`)).status).toBe(404);
    await op('DELETE', `/orgs/${org}/webhook-subscriptions/${sub.id}`);
  });

  it('redelivery sends a delivery again with the same id and event to the receiver', async () => {
    const r = await receiver();
    const sub = (await op('POST', `/orgs/${org}/webhook-subscriptions`, { url: r.url, events: ['sample.created'] })).body.data;
    const sample = (await api('POST', '/v1/samples', { name: 'to redeliver' })).body.data;
    const first = await eventually(() => r.requests.find((x) => x.body.data.id === sample.id));
    const deliveries = `/orgs/${org}/webhook-subscriptions/${sub.id}/deliveries`;
    const delivered = await eventually(async () => {
      const d = (await op('GET', deliveries)).body.data.find((x: { id: string }) => x.id === first.body.id);
      return d?.status === 'delivered' ? d : undefined;
    });

    const again = await op('POST', `${deliveries}/${delivered.id}/redeliver`);
    expect(again.status).toBe(202);
    expect(again.body.data).toEqual({ id: delivered.id, status: 'pending' });
    const second = await eventually(() => r.requests.filter((x) => x.body.data.id === sample.id)[1]);
    expect(second.body.id).toBe(first.body.id);
    expect(second.headers['x-service-delivery']).toBe(first.headers['x-service-delivery']);
    expect(second.body.event).toBe('sample.created');
    expect(second.body.data).toEqual(first.body.data);
    expect(signedBy(second, sub.secret)).toBe(true);
    const settled = await eventually(async () => {
      const d = (await op('GET', deliveries)).body.data.find((x: { id: string }) => x.id === delivered.id);
      return d?.status === 'delivered' ? d : undefined;
    });
    expect(settled).toMatchObject({ attempts: 1, last_status_code: 200 });

    expect((await op('POST', `${deliveries}/${randomUUID()}/redeliver`)).status).toBe(404);
    expect((await op('POST', `/orgs/${otherOrg}/webhook-subscriptions/${sub.id}/deliveries/${delivered.id}/redeliver`)).status).toBe(404);
  });
});

describe('redelivery of a failed delivery, and of one still scheduled', () => {
  it('gives a failed delivery a fresh set of attempts under the same id; one in flight is 409 delivery_pending', async () => {
    let up = false;
    const r = await new Receiver(() => (up ? 200 : 500)).start();
    receivers.push(r);
    const sub = (await op('POST', `/orgs/${org}/webhook-subscriptions`, { url: r.url, events: ['sample.created'] })).body.data;
    const sample = (await api('POST', '/v1/samples', { name: 'fails first' })).body.data;
    const deliveries = `/orgs/${org}/webhook-subscriptions/${sub.id}/deliveries`;
    const failed = await eventually(async () => {
      const d = (await op('GET', deliveries)).body.data[0];
      return d?.status === 'failed' ? d : undefined;
    });
    expect(failed).toMatchObject({ attempts: 5, last_status_code: 500 });
    up = true;
    expect((await op('POST', `${deliveries}/${failed.id}/redeliver`)).status).toBe(202);
    const delivered = await eventually(async () => {
      const d = (await op('GET', deliveries)).body.data[0];
      return d?.status === 'delivered' ? d : undefined;
    });
    expect(delivered).toMatchObject({ id: failed.id, attempts: 1, last_status_code: 200 });
    const seen = r.requests.filter((x) => x.body.data.id === sample.id);
    expect(seen).toHaveLength(6);
    expect(new Set(seen.map((x) => x.body.id))).toEqual(new Set([failed.id]));

    // a receiver that holds the request: the delivery stays pending (leased) meanwhile
    const held: ServerResponse[] = [];
    const hold = createServer((_req, res) => held.push(res));
    await new Promise<void>((resolve) => hold.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(hold.address() as AddressInfo).port}/hook`;
      const slow = (await op('POST', `/orgs/${org}/webhook-subscriptions`, { url, events: ['sample.created'] })).body.data;
      await api('POST', '/v1/samples', { name: 'held' });
      await eventually(() => (held.length ? true : undefined));
      const slowDeliveries = `/orgs/${org}/webhook-subscriptions/${slow.id}/deliveries`;
      const pending = (await op('GET', slowDeliveries)).body.data[0];
      expect(pending.status).toBe('pending');
      const busy = await op('POST', `${slowDeliveries}/${pending.id}/redeliver`);
      expect([busy.status, busy.body.error.code]).toEqual([409, 'delivery_pending']);
      for (const res of held) res.end('ok');
      await eventually(async () => ((await op('GET', slowDeliveries)).body.data[0]?.status === 'delivered' ? true : undefined));
      expect(held).toHaveLength(1);
      await op('DELETE', `/orgs/${org}/webhook-subscriptions/${slow.id}`);
    } finally {
      hold.closeAllConnections();
      await new Promise<void>((resolve) => hold.close(() => resolve()));
    }
    await op('DELETE', `/orgs/${org}/webhook-subscriptions/${sub.id}`);
  });
});

describe('inbound endpoints', () => {
  const sig = (secret: string, raw: string, t = Math.floor(Date.now() / 1000)) =>
    `t=${t},v1=${createHmac('sha256', secret).update(`${t}.`).update(raw).digest('hex')}`;
  const send = async (ep: { slug: string }, secret: string, n: number) => {
    const raw = JSON.stringify({ event_type: 'order.updated', occurred_at: new Date().toISOString(), external_id: `x-${n}-${randomUUID()}`, payload: { n } });
    const res = await fetch(`${stack.url}/functions/v1/inbound-webhook/${org}/${ep.slug}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-service-signature': sig(secret, raw) },
      body: raw,
    });
    return res.status;
  };

  it('lists, reads, changes and deletes them; rotation accepts the old and the new secret for 24 hours', async () => {
    const ep = (await op('POST', `/orgs/${org}/inbound-endpoints`, { allowed_event_types: ['order.updated'] })).body.data;
    const view = {
      id: ep.id,
      slug: ep.slug,
      url: ep.url,
      allowed_event_types: ['order.updated'],
      job_type: null,
      active: true,
      created_at: expect.any(String),
      updated_at: expect.any(String),
      previous_secret_expires_at: null,
    };
    const list = await op('GET', `/orgs/${org}/inbound-endpoints`);
    expect(list.body.data).toContainEqual(view);
    expect(list.text).not.toContain(ep.secret);
    expect((await op('GET', `/orgs/${org}/inbound-endpoints/${ep.id}`)).body.data).toEqual(view);
    expect((await op('GET', `/orgs/${otherOrg}/inbound-endpoints/${ep.id}`)).status).toBe(404);

    const rotated = await op('POST', `/orgs/${org}/inbound-endpoints/${ep.id}/rotate-secret`);
    expect(rotated.status).toBe(200);
    const newSecret: string = rotated.body.data.secret;
    expect(newSecret).not.toBe(ep.secret);
    expect((Date.parse(rotated.body.data.previous_secret_expires_at) - Date.now()) / 3_600_000).toBeGreaterThan(23.9);
    expect(await send(ep, ep.secret, 1)).toBe(202);
    expect(await send(ep, newSecret, 2)).toBe(202);
    expect(await send(ep, 'whsec_neither-of-the-two-secrets', 3)).toBe(401);
    // the overlap over: the old secret is refused (a second connection to the schema is needed to move time)
    if (stack.databaseUrl) {
      await sql(`update webhooks.inbound_endpoints set previous_secret_expires_at = now() - interval '1 second' where id = $1`, [ep.id]);
      expect(await send(ep, ep.secret, 4)).toBe(401);
      expect(await send(ep, newSecret, 5)).toBe(202);
    }

    const patched = await op('PATCH', `/orgs/${org}/inbound-endpoints/${ep.id}`, { allowed_event_types: ['order.created'], job_type: 'box_layout_pdf' });
    expect(patched.status).toBe(200);
    expect(patched.body.data).toMatchObject({ allowed_event_types: ['order.created'], job_type: 'box_layout_pdf', active: true });
    expect((await op('PATCH', `/orgs/${org}/inbound-endpoints/${ep.id}`, { job_type: null })).body.data.job_type).toBeNull();
    const badJob = await op('PATCH', `/orgs/${org}/inbound-endpoints/${ep.id}`, { job_type: 'teleport' });
    expect(badJob.status).toBe(400);
    expect(badJob.body.error.details.fields[0].path).toBe('job_type');
    expect((await op('PATCH', `/orgs/${org}/inbound-endpoints/${ep.id}`, { slug: 'renamed' })).body.error.details.fields).toEqual([
      { path: 'slug', message: 'unknown or read-only field' },
    ]);
    await op('PATCH', `/orgs/${org}/inbound-endpoints/${ep.id}`, { allowed_event_types: [], active: false });
    expect(await send(ep, newSecret, 6)).toBe(404);
    await op('PATCH', `/orgs/${org}/inbound-endpoints/${ep.id}`, { active: true });
    expect(await send(ep, newSecret, 7)).toBe(202);

    expect((await op('DELETE', `/orgs/${otherOrg}/inbound-endpoints/${ep.id}`)).status).toBe(404);
    expect((await op('DELETE', `/orgs/${org}/inbound-endpoints/${ep.id}`)).status).toBe(204);
    expect(await send(ep, newSecret, 8)).toBe(404);
    expect((await op('GET', `/orgs/${org}/inbound-endpoints/${ep.id}`)).status).toBe(404);
  });
});

describe('OAuth clients', () => {
  it('lists and reads clients without their secret; deleting one revokes its grants: the tokens stop working', async () => {
    const REDIRECT = 'https://client.example.test/callback';
    const client = await stack.admin.call<{ client_id: string; client_secret: string }>(
      'POST',
      '/oauth-clients',
      { name: 'LIMS', redirect_uris: [REDIRECT], scopes: ['read'] },
      201,
    );
    const view = { client_id: client.client_id, name: 'LIMS', redirect_uris: [REDIRECT], scopes: ['read'], created_at: expect.any(String), public: false };
    const list = await op('GET', '/oauth-clients?limit=200');
    expect(list.body.data).toContainEqual(view);
    expect(list.text).not.toContain(client.client_secret);
    expect((await op('GET', `/oauth-clients/${client.client_id}`)).body.data).toEqual(view);

    const password = 'a long enough password';
    const user = await stack.admin.createUser({ password });
    await stack.admin.putMember(org, user.id, 'researcher');
    const loc = await authorize(
      stack.url,
      { client_id: client.client_id, redirect_uri: REDIRECT, scope: 'read', state: 's' },
      { email: user.email, password },
      org,
    );
    const tokens = await token(stack.url, client, { grant_type: 'authorization_code', code: loc.searchParams.get('code')!, redirect_uri: REDIRECT });
    expect(tokens.status).toBe(200);
    expect((await call(stack.url, 'GET', '/v1/ping', { token: tokens.body.access_token })).status).toBe(200);

    expect((await op('DELETE', `/oauth-clients/${client.client_id}`)).status).toBe(204);
    await eventually(async () => ((await call(stack.url, 'GET', '/v1/ping', { token: tokens.body.access_token })).status === 401 ? true : undefined), 5_000);
    expect((await token(stack.url, client, { grant_type: 'refresh_token', refresh_token: tokens.body.refresh_token })).status).toBeGreaterThanOrEqual(400);
    expect((await op('GET', `/oauth-clients/${client.client_id}`)).status).toBe(404);
    expect((await op('GET', '/oauth-clients?limit=200')).body.data.map((c: { client_id: string }) => c.client_id)).not.toContain(client.client_id);
    expect((await op('DELETE', `/oauth-clients/${client.client_id}`)).status).toBe(404);
    expect((await op('DELETE', '/oauth-clients/not-a-uuid')).status).toBe(404);
  });
});

describe('an OAuth client deleted while a code of it is exchanged', () => {
  it('leaves no working token behind, whichever comes first', async () => {
    const REDIRECT = 'https://client.example.test/callback';
    const password = 'a long enough password';
    const user = await stack.admin.createUser({ password });
    await stack.admin.putMember(org, user.id, 'researcher');
    for (let round = 0; round < 5; round++) {
      const client = await stack.admin.call<{ client_id: string; client_secret: string }>(
        'POST',
        '/oauth-clients',
        { name: `race ${round}`, redirect_uris: [REDIRECT], scopes: ['read'] },
        201,
      );
      const loc = await authorize(
        stack.url,
        { client_id: client.client_id, redirect_uri: REDIRECT, scope: 'read', state: 's' },
        { email: user.email, password },
        org,
      );
      const [exchanged, deleted] = await Promise.all([
        token(stack.url, client, { grant_type: 'authorization_code', code: loc.searchParams.get('code')!, redirect_uri: REDIRECT }),
        op('DELETE', `/oauth-clients/${client.client_id}`),
      ]);
      expect([round, deleted.status]).toEqual([round, 204]);
      if (exchanged.status !== 200) continue;
      // the exchange won: its tokens were revoked with the client's grants
      await eventually(
        async () => ((await call(stack.url, 'GET', '/v1/ping', { token: exchanged.body.access_token })).status === 401 ? true : undefined),
        5_000,
      );
      expect([round, (await token(stack.url, client, { grant_type: 'refresh_token', refresh_token: exchanged.body.refresh_token })).status]).not.toEqual([
        round,
        200,
      ]);
    }
  });
});

describe('the operator token', () => {
  it.each([
    ['GET', '/orgs'],
    ['GET', '/users'],
    ['GET', '/oauth-clients'],
  ])('is needed for %s %s', async (method, path) => {
    expect((await call(stack.url, method, `/admin/v1${path}`)).status).toBe(401);
    expect((await call(stack.url, method, `/admin/v1${path}`, { token: writeKey })).status).toBe(401);
  });
});
