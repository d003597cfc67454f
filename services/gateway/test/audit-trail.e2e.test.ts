import { createHash } from 'node:crypto';
import { Client } from 'pg';
import { startStack, type Stack } from '@lab/testing';
import { call, eventually } from './http';

// The audit trail as an auditor meets it: no credential in what it shows, and a
// chain that proves it was not edited. Reads the audit table straight from
// PostgreSQL, so it needs the stack's database (DATABASE_URL).

let stack: Stack;
let db: Client;

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'notebook', 'audit', 'webhooks'] });
  if (!stack.databaseUrl) throw new Error('this test reads the audit table and needs DATABASE_URL');
  db = new Client({ connectionString: stack.databaseUrl });
  await db.connect();
});

afterAll(async () => {
  await db?.end();
  await stack?.stop();
});

const op = (method: string, path: string, body?: unknown) => stack.admin.call<any>(method, path, body, method === 'POST' ? 201 : undefined);

/** The stored audit rows of these record ids, once all of them are there. */
async function auditRowsOf(ids: string[]): Promise<{ record_id: string; resource: string; before: unknown; after: unknown }[]> {
  return eventually(async () => {
    const { rows } = await db.query('select record_id, resource, before, after from audit.records where record_id = any($1)', [ids]);
    return ids.every((id) => rows.some((r) => r.record_id === id)) ? rows : undefined;
  }, 20_000);
}

it('shows no password, secret, token or hash of one in before or after of any audited resource', async () => {
  const org = await stack.admin.createOrg();
  const password = 'correct horse battery staple';
  const user = await stack.admin.createUser({ email: `s-${Date.now()}@example.test`, password, name: 'S' });
  await stack.admin.putMember(org.id, user.id, 'admin');
  const key = await stack.admin.createApiKey(org.id, { scopes: ['read'], user_id: user.id });
  const pat = await stack.admin.createPat(user.id, { scopes: ['read'], org_id: org.id });
  const subscription = await op('POST', `/orgs/${org.id}/webhook-subscriptions`, {
    url: 'https://example.test/hook',
    events: ['*'],
    secret: 'whsec_0123456789abcdef0123456789',
  });
  const inbound = await op('POST', `/orgs/${org.id}/inbound-endpoints`, {});
  const client = await op('POST', '/oauth-clients', { name: 'c', redirect_uris: ['https://example.test/cb'] });
  const grant = await call(stack.url, 'POST', '/auth/v1/token', { body: { grant_type: 'password', email: user.email, password } });
  expect(grant.status).toBe(200);
  await op('DELETE', `/tokens/${pat.id}`);

  const secrets = [
    password,
    key.token,
    pat.token,
    subscription.secret,
    inbound.secret,
    client.client_secret,
    grant.body.access_token,
    grant.body.refresh_token,
  ];
  expect(secrets.every((s) => typeof s === 'string' && s.length >= 20)).toBe(true);
  const forms = secrets.flatMap((s: string) => [s, createHash('sha256').update(s).digest('hex'), createHash('sha256').update(s).digest('base64url')]);

  const rows = await auditRowsOf([user.id, key.id, pat.id, subscription.id, inbound.id, client.client_id]);
  // the revocation and the sign-in session are audited too
  await eventually(async () => {
    const { rows: more } = await db.query(`select 1 from audit.records where resource = 'session' and after->>'user_id' = $1`, [user.id]);
    return more.length ? true : undefined;
  }, 20_000);
  const { rows: all } = await db.query('select resource, before::text as before, after::text as after from audit.records');
  expect(rows.length).toBeGreaterThanOrEqual(6);
  for (const r of all) {
    const shown = `${r.before ?? ''} ${r.after ?? ''}`;
    for (const f of forms) expect(shown.includes(f) ? `${r.resource} shows ${f}` : null).toBeNull();
    expect(shown.includes('$argon2') ? `${r.resource} shows a password hash` : null).toBeNull();
  }
});

it('verifies an organisation chain over the management API and names an entry edited in PostgreSQL', async () => {
  const org = await stack.admin.createOrg();
  const writer = (await stack.admin.createApiKey(org.id, { scopes: ['write'] })).token;
  const ids: string[] = [];
  for (let i = 0; i < 4; i++) {
    const r = await call(stack.url, 'POST', '/v1/samples', { token: writer, body: { name: `s${i}` } });
    expect(r.status).toBe(201);
    ids.push(r.body.data.id);
  }
  await auditRowsOf(ids);
  const verify = () => call(stack.url, 'GET', `/admin/v1/orgs/${org.id}/audit/verify`, { token: stack.operatorToken });

  const sound = await verify();
  expect(sound.status).toBe(200);
  const { rows: entries } = await db.query('select id, seq::int as seq, hash from audit.records where org_id = $1 order by seq', [org.id]);
  expect(sound.body).toEqual({ data: { ok: true, entries: entries.length, head_hash: entries.at(-1)!.hash } });

  const target = entries[2]!;
  await db.query(`update audit.records set action = 'read' where id = $1`, [target.id]);
  const broken = await verify();
  expect(broken.status).toBe(200);
  expect(broken.body).toEqual({ data: { ok: false, entries: 2, broken: { seq: 3, id: target.id, problem: 'hash_mismatch' } } });

  expect((await call(stack.url, 'GET', `/admin/v1/orgs/${org.id}/audit/verify`)).status).toBe(401);
  expect((await call(stack.url, 'GET', `/admin/v1/orgs/0190a0c8-0000-7000-8000-000000000001/audit/verify`, { token: stack.operatorToken })).status).toBe(404);
  expect((await call(stack.url, 'GET', '/admin/v1/orgs/not-a-uuid/audit/verify', { token: stack.operatorToken })).status).toBe(404);
});
