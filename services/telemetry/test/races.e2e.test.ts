import { strict as assert } from 'node:assert';
import { randomUUID } from 'node:crypto';
import { holdTransaction, startStack, type Stack } from '@lab/testing';
import { call, eventually } from '../../gateway/test/http';

// Telemetry writes that race each other through the gateway: the same new device
// or connector written twice at the same moment, and device syncs of connectors
// whose device lists overlap.

let stack: Stack;
let orgId: string;
let key: string;
let auditor: string;

const api = (method: string, path: string, token: string, body?: unknown) => call(stack.url, method, path, { token, body });

/** A fresh API key bound to a connector that does not exist yet (it comes into being with its first heartbeat). */
const connectorKey = async (connectorId: string) =>
  (
    await stack.admin.call<{ token: string }>(
      'POST',
      `/orgs/${orgId}/api-keys`,
      { name: 'instrument', scopes: ['read', 'write', 'devices:register'], connector_id: connectorId },
      201,
    )
  ).token;

/** Every device of the org with this identifier (through the API). */
const devicesWith = async (identifier: string) => {
  const r = await api('GET', '/v1/devices?limit=500', key);
  expect(r.status).toBe(200);
  return (r.body.data as any[]).filter((d) => d.identifier === identifier);
};

const ROUNDS = 10;
const withPg = process.env.DATABASE_URL ? it : it.skip;

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'audit', 'telemetry'] });
  const org = await stack.admin.createOrg({ modules: ['analytics_qc'], rate_limit: { per_minute: 100_000, per_hour: 1_000_000 } });
  orgId = org.id;
  key = (await stack.admin.createApiKey(org.id, { scopes: ['read', 'write', 'devices:register'] })).token;
  auditor = (await stack.admin.createApiKey(org.id, { scopes: ['audit:read'] })).token;
});

afterAll(async () => {
  await stack?.stop();
});

describe('concurrent first writes', () => {
  // Both calls found no device and both inserted one: the second failed on the
  // identifier's unique key (409 device_identifier_taken), though the device now
  // existed and its result should have been stored against it.
  it('stores two results sent at the same moment for a new device_identifier against one device', async () => {
    const deviceIds: string[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const identifier = `race-${round}-${randomUUID()}`;
      const send = (value: number) => api('POST', '/v1/results', key, { device_identifier: identifier, values: [{ name: 'mass', value }] });
      const answers = await Promise.all([send(1), send(2)]);
      expect(answers.map((a) => [a.status, a.body?.error?.code])).toEqual([
        [201, undefined],
        [201, undefined],
      ]);
      const devices = await devicesWith(identifier);
      expect(devices).toHaveLength(1);
      expect(answers.map((a) => [a.body.data.device_id, a.body.data.device_identifier])).toEqual([
        [devices[0].id, identifier],
        [devices[0].id, identifier],
      ]);
      const results = await api('GET', `/v1/results?device_id=${devices[0].id}`, key);
      expect(results.body.pagination.total).toBe(2);
      expect((results.body.data as any[]).map((r) => r.values[0].value).sort()).toEqual([1, 2]);
      deviceIds.push(devices[0].id);
    }
    // only the call that registered a device audits it: once each (the results'
    // records travel in the same transactions, so all are there once they are)
    const audit = await eventually(async () => {
      const r = await api('GET', '/v1/audit?limit=1000', auditor);
      const records = (r.body?.data ?? []) as any[];
      return records.filter((x) => x.resource === 'result').length >= 2 * ROUNDS ? records : undefined;
    });
    const created = audit.filter((x) => x.resource === 'device' && x.action === 'create').map((x) => x.record_id);
    expect(created.sort()).toEqual([...deviceIds].sort());
    // an explicit registration of a taken identifier is still a conflict
    const identifier = `taken-${randomUUID()}`;
    expect((await api('POST', '/v1/devices', key, { name: 'A', identifier })).status).toBe(201);
    const again = await api('POST', '/v1/devices', key, { name: 'B', identifier });
    expect([again.status, again.body.error.code]).toEqual([409, 'device_identifier_taken']);
  });

  // Both heartbeats found no connector row to update and both inserted the bound
  // connector's id: the second failed on the primary key (a 500).
  it("creates a bound key's connector once when its first heartbeat is sent twice at the same moment", async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const connectorId = randomUUID();
      const token = await connectorKey(connectorId);
      const identifier = `synced-${round}-${randomUUID()}`;
      const body = { name: `bound-${connectorId}`, version: '1.0', devices: [{ identifier, name: 'Balance' }] };
      const answers = await Promise.all([api('POST', '/v1/connectors', token, body), api('POST', '/v1/connectors', token, body)]);
      expect(answers.map((a) => [a.status, a.body?.error?.code]).sort()).toEqual([
        [200, undefined],
        [201, undefined],
      ]);
      expect(answers.map((a) => [a.body.data.id, a.body.data.devices_synced])).toEqual([
        [connectorId, 1],
        [connectorId, 1],
      ]);
      const mine = await api('GET', '/v1/connectors', token);
      expect(mine.body.data.map((c: any) => [c.id, c.device_count])).toEqual([[connectorId, 1]]);
      const devices = await devicesWith(identifier);
      expect(devices.map((d) => d.connector_id)).toEqual([connectorId]);
    }
  });
});

describe('device sync of connectors', () => {
  // The key's "taken by another connector" check and the upsert were separate
  // statements: a device another connector inserted in between was taken over.
  withPg('does not take over a device that another connector inserts while a bound key syncs it', async () => {
    const mineId = randomUUID();
    const token = await connectorKey(mineId);
    expect((await api('POST', '/v1/connectors', token, { name: `mine-${mineId}` })).status).toBe(201);
    const other = await api('POST', '/v1/connectors', key, { name: `other-${randomUUID()}` });
    expect(other.status).toBe(201);
    const identifier = `contested-${randomUUID()}`;
    const inserting = await holdTransaction(stack.databaseUrl!, (db) =>
      db.query(`insert into telemetry.devices (id, org_id, name, identifier, connector_id) values ($1, $2, 'Theirs', $3, $4)`, [
        randomUUID(),
        orgId,
        identifier,
        other.body.data.id,
      ]),
    );
    let heartbeat;
    try {
      const sent = api('POST', '/v1/connectors', token, { devices: [{ identifier, name: 'Mine' }] });
      await inserting.waiters(1);
      await inserting.commit();
      heartbeat = await sent;
    } finally {
      await inserting.close();
    }
    expect([heartbeat.status, heartbeat.body.error?.code, heartbeat.body.error?.details]).toEqual([403, 'device_not_allowed', { identifiers: [identifier] }]);
    const devices = await devicesWith(identifier);
    expect(devices.map((d) => [d.name, d.connector_id])).toEqual([['Theirs', other.body.data.id]]);
  });

  // Two heartbeats listing the same devices in different orders locked them in
  // those orders: each waited for a device the other held (a deadlock, 503).
  withPg('syncs overlapping device lists sent in different orders at the same moment', async () => {
    const [c1, c2] = await Promise.all([
      api('POST', '/v1/connectors', key, { name: `one-${randomUUID()}` }),
      api('POST', '/v1/connectors', key, { name: `two-${randomUUID()}` }),
    ]);
    const tag = randomUUID();
    const a = { identifier: `a-${tag}`, name: 'A' };
    const b = { identifier: `b-${tag}`, name: 'B' };
    const first = await api('POST', '/v1/devices', key, a);
    expect((await api('POST', '/v1/devices', key, b)).status).toBe(201);
    // holding device a makes both heartbeats wait at a: the one that lists b
    // first holds b by then
    const holding = await holdTransaction(stack.databaseUrl!, (db) =>
      db.query('select 1 from telemetry.devices where id = $1 for update', [first.body.data.id]),
    );
    let answers;
    try {
      const one = api('POST', '/v1/connectors', key, { connector_id: c1.body.data.id, devices: [a, b] });
      await holding.waiters(1);
      const two = api('POST', '/v1/connectors', key, { connector_id: c2.body.data.id, devices: [b, a] });
      await holding.waiters(2);
      await holding.commit();
      answers = await Promise.all([one, two]);
    } finally {
      await holding.close();
    }
    expect(answers.map((x) => [x.status, x.body?.error?.code, x.body?.data?.devices_synced])).toEqual([
      [200, undefined, 2],
      [200, undefined, 2],
    ]);
  });
});

describe('API keys bound to connectors and devices', () => {
  it("refuses to bind a key to another organisation's connector or devices, and such a key gets a 4xx, not a 500", async () => {
    const ownConnector = randomUUID();
    const theirs = (
      await api('POST', '/v1/connectors', await connectorKey(ownConnector), {
        name: `theirs-${ownConnector}`,
        devices: [{ identifier: `d-${ownConnector}`, name: 'Balance' }],
      })
    ).body.data;
    expect(theirs.id).toBe(ownConnector);
    const [theirDevice] = await devicesWith(`d-${ownConnector}`);

    const other = (await stack.admin.createOrg({ modules: ['analytics_qc'] })).id;
    const bind = (body: Record<string, unknown>) =>
      call(stack.url, 'POST', `/admin/v1/orgs/${other}/api-keys`, {
        token: stack.operatorToken,
        body: { name: 'instrument', scopes: ['write', 'devices:register'], ...body },
      });
    const connector = await bind({ connector_id: theirs.id });
    expect([connector.status, connector.body.error.code, connector.body.error.details.field]).toEqual([400, 'validation_failed', 'connector_id']);
    const devices = await bind({ device_ids: [randomUUID(), theirDevice.id] });
    expect(devices.status).toBe(400);
    expect(devices.body.error.details.fields.map((f: { path: string }) => f.path)).toEqual(['device_ids.0', 'device_ids.1']);
    // a connector that does not exist yet is still fine: it comes into being with the first heartbeat
    expect((await bind({ connector_id: randomUUID() })).status).toBe(201);

    // a key bound before this check existed: its heartbeat was a 500 (primary key of the other org's row)
    assert(stack.databaseUrl, 'storing a legacy binding needs a connection of its own: DATABASE_URL (npm test finds it)');
    const legacy = await bind({ connector_id: randomUUID() });
    const db = new (await import('pg')).default.Client({ connectionString: stack.databaseUrl });
    await db.connect();
    try {
      await db.query('update identity.tokens set connector_id = $1 where id = $2', [theirs.id, legacy.body.data.id]);
    } finally {
      await db.end();
    }
    const beat = await api('POST', '/v1/connectors', legacy.body.data.token, { name: 'stolen' });
    expect([beat.status, beat.body.error.code]).toEqual([403, 'connector_not_allowed']);
  });
});

describe('a point deleted while readings for it arrive', () => {
  // The point had no readings when the delete looked, the reading's insert then
  // waited on the delete's lock and failed on the foreign key (a 500); or the
  // reading committed first and the delete, counting readings in a snapshot taken
  // before, removed the point and with it the reading (on delete cascade).
  it('either keeps the reading (the point deactivated) or refuses it (the point gone), never a 500, never a reading lost', async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const point = await stack.admin.call<{ id: string }>('POST', `/orgs/${orgId}/environmental-points`, { parameter: 'temperature', unit: 'C' }, 201);
      const [ingest, del] = await Promise.all([
        api('POST', '/v1/environmental-readings', key, { point_id: point.id, value: 4 }),
        call(stack.url, 'DELETE', `/admin/v1/orgs/${orgId}/environmental-points/${point.id}`, { token: stack.operatorToken }),
      ]);
      const stored = (await api('GET', `/v1/environmental-readings?point_id=${point.id}`, key)).body.data as unknown[];
      if (ingest.status === 201) {
        // the reading is there and its point too, deactivated
        expect([round, del.status, del.body?.data?.active, stored.length]).toEqual([round, 200, false, 1]);
      } else {
        expect([round, ingest.status, ingest.body.error.details.rejected[0].code, del.status, stored.length]).toEqual([round, 422, 'point_not_found', 204, 0]);
      }
    }
  });
});
