import { mkdtempSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, loadConfig } from '@lab/kit';
import { waitFor } from '@lab/testing/waits';
import { standaloneEnv, startStandalone, type Standalone } from '../src/standalone';

// The embedded default a new user meets: PGlite and the in-process bus, whatever
// servers the test environment offers.
const dataDir = mkdtempSync(join(tmpdir(), 'lab-standalone-'));
const cfg = loadConfig(standaloneEnv, { PORT: '0', HOST: '127.0.0.1', LAB_DATA_DIR: dataDir, METRICS_PORT: '0' });
const log = createLogger('standalone-test', 'silent');

async function call(lab: Standalone, method: string, path: string, token: string, body?: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${lab.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
}

test('starts embedded, serves the whole flow, and keeps its data across a restart', async () => {
  let lab = await startStandalone(cfg, log);
  let restarted = false;
  try {
    expect(lab.operatorTokenFile).toBe(join(dataDir, 'operator-token'));
    expect(statSync(lab.operatorTokenFile!).mode & 0o777).toBe(0o600);
    expect((await fetch(`${lab.url}/v1/health`)).status).toBe(200);

    const op = lab.operatorToken;
    const org = await call(lab, 'POST', '/admin/v1/orgs', op, { name: 'Embedded lab' });
    expect(org.status).toBe(201);
    const user = await call(lab, 'POST', '/admin/v1/users', op, { email: 'e@example.org', password: 'long enough password' });
    expect(user.status).toBe(201);
    expect((await call(lab, 'PUT', `/admin/v1/orgs/${org.body.data.id}/members/${user.body.data.id}`, op, { role: 'admin' })).status).toBe(200);
    const key = await call(lab, 'POST', `/admin/v1/orgs/${org.body.data.id}/api-keys`, op, {
      name: 'k',
      scopes: ['write', 'audit:read'],
      user_id: user.body.data.id,
    });
    expect(key.status).toBe(201);
    const token = key.body.data.token as string;

    const created = await call(lab, 'POST', '/v1/samples', token, { name: 'kept' }, { 'idempotency-key': 'standalone-1' });
    expect(created.status).toBe(201);

    // the audit record travels outbox -> in-process bus -> audit service
    const audit = await waitFor('the sample audit record', async () => {
      const r = await call(lab, 'GET', '/v1/audit', token);
      return r.body.data.some((x: { resource: string }) => x.resource === 'sample') ? r : undefined;
    });
    expect(audit.body.data.map((r: { resource: string; action: string }) => `${r.resource}:${r.action}`)).toContain('sample:create');
    // every service answers for its outbox's dead letters (none here)
    const dead = await call(lab, 'GET', '/admin/v1/dead-letters', op);
    expect([dead.status, dead.body]).toEqual([200, { data: [], pagination: { limit: 50, offset: 0, total: 0 } }]);

    await lab.stop();
    restarted = true;
    lab = await startStandalone(cfg, log);
    restarted = false;
    expect(lab.operatorToken).toBe(op);
    const got = await call(lab, 'GET', `/v1/samples/${created.body.data.id}`, token);
    expect(got.status).toBe(200);
    expect(got.body.data.name).toBe('kept');
    // the idempotency record survived too
    const replay = await call(lab, 'POST', '/v1/samples', token, { name: 'kept' }, { 'idempotency-key': 'standalone-1' });
    expect(replay.headers.get('idempotent-replay')).toBe('true');
    expect(replay.body.data.id).toBe(created.body.data.id);
  } finally {
    if (!restarted) await lab.stop();
  }
  // two starts of every service on PGlite (the first one prepares the data directory): seconds
  // alone, a minute and more on a machine busy with other suites
}, 180_000);
