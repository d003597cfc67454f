import { createHash, randomUUID } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { connect, type Channel, type ChannelModel } from 'amqplib';
import {
  AmqpBus,
  DomainError,
  RpcClient,
  createLogger,
  operatorContext,
  runService,
  systemContext,
  type BusMessage,
  type CallerContext,
  type RunningService,
} from '@lab/kit';
import { identity } from '@lab/contracts';
import { definition, hashToken, parseApiKeyOrg } from '@lab/identity';
import { MANAGEMENT_ONLY } from '../src/server';
import { dropFreshDatabases, freshDatabaseUrl, uniqueExchange } from '../../../testing/src/backing';

const secret = 'test-secret-0123456789';
const log = createLogger('test', 'silent');
/** used only when no DATABASE_URL is set (embedded PGlite) */
const dataDir = `/tmp/identity-test-${randomUUID()}`;

let bus: AmqpBus;
let svc: RunningService;
let client: RpcClient<typeof identity.IdentityServiceService>;
let amqp: ChannelModel;
let channel: Channel;

/** Every identity.* message seen on the test exchange, in arrival order. */
const seen: BusMessage[] = [];
const waiters: { match: (m: BusMessage) => boolean; resolve: (m: BusMessage) => void }[] = [];

function nextMessage(match: (m: BusMessage) => boolean): Promise<BusMessage> {
  const hit = seen.find(match);
  if (hit) return Promise.resolve(hit);
  return new Promise((resolve) => waiters.push({ match, resolve }));
}

beforeAll(async () => {
  const exchange = uniqueExchange();
  amqp = await connect(process.env.AMQP_URL!);
  channel = await amqp.createChannel();
  await channel.assertExchange(exchange, 'topic', { durable: true });
  const { queue } = await channel.assertQueue('', { exclusive: true, autoDelete: true });
  await channel.bindQueue(queue, exchange, 'identity.#');
  await channel.consume(
    queue,
    (raw) => {
      if (!raw) return;
      const msg = JSON.parse(raw.content.toString('utf8')) as BusMessage;
      seen.push(msg);
      for (const w of waiters.filter((x) => x.match(msg))) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(msg);
      }
    },
    { noAck: true },
  );
  bus = await AmqpBus.connect(process.env.AMQP_URL!, exchange, log);
  svc = await runService(definition, {
    log,
    bus,
    secret,
    databaseUrl: await freshDatabaseUrl(),
    dataDir,
    grpcAddress: '127.0.0.1:0',
  });
  client = new RpcClient(identity.IdentityServiceClient, svc.address, { secret });
});

afterAll(async () => {
  client?.close();
  await svc?.stop();
  await bus?.close();
  await amqp?.close();
  await dropFreshDatabases();
  await rm(dataDir, { recursive: true, force: true });
});

/** the management API's caller: the RPCs these tests drive are the operator's */
const ctx = () => operatorContext(randomUUID());

async function rejection(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    if (err instanceof DomainError) return `${err.kind}/${err.code}`;
    throw err;
  }
  return 'ok';
}

const resolve = (token: string, org_id?: string) => client.call('resolveToken', { token_hash: hashToken(token), ...(org_id ? { org_id } : {}) }, ctx());

const email = () => `u-${randomUUID()}@Example.org`;

/** A fresh org with one member of the given role. */
async function orgWithMember(role = 'researcher', password?: string) {
  const org = await client.call('createOrg', { name: 'Lab', modules: ['lab_equipment'] }, ctx());
  const user = await client.call('createUser', { email: email(), name: 'Ada', ...(password ? { password } : {}) }, ctx());
  await client.call('putMember', { org_id: org.id, user_id: user.id, role }, ctx());
  return { org, user };
}

describe('identity over gRPC', () => {
  it('creates and reads orgs, departments, users and members', async () => {
    const org = await client.call(
      'createOrg',
      { name: 'Chem Lab', modules: ['analytics_qc', 'lab_equipment'], rate_limit: { per_minute: 60, per_hour: 1000 } },
      ctx(),
    );
    expect(org).toMatchObject({ name: 'Chem Lab', modules: ['lab_equipment', 'analytics_qc'], rate_limit: { per_minute: 60, per_hour: 1000 } });
    expect(new Date(org.created_at).toISOString()).toBe(org.created_at);
    expect(await client.call('getOrg', { org_id: org.id }, ctx())).toEqual(org);

    const updated = await client.call('updateOrg', { org_id: org.id, modules: { modules: ['sample_intake'] } }, ctx());
    expect(updated).toMatchObject({ name: 'Chem Lab', modules: ['sample_intake'], rate_limit: { per_minute: 60, per_hour: 1000 } });
    await nextMessage((m) => m.type === 'identity.org.updated' && (m.data as { org_id: string }).org_id === org.id);

    const dept = await client.call('createDepartment', { org_id: org.id, name: 'QC' }, ctx());
    const user = await client.call('createUser', { email: 'Grace.' + email(), name: 'Grace' }, ctx());
    expect(await client.call('getUser', { user_id: user.id }, ctx())).toEqual(user);
    expect(await rejection(client.call('createUser', { email: user.email.toUpperCase() }, ctx()))).toBe('conflict/email_taken');

    const member = await client.call('putMember', { org_id: org.id, user_id: user.id, role: 'qm', department_id: dept.id }, ctx());
    expect(member).toMatchObject({ org_id: org.id, user_id: user.id, role: 'qm', department_id: dept.id, email: user.email });

    const other = await orgWithMember();
    const foreignDept = await client.call('createDepartment', { org_id: other.org.id, name: 'Elsewhere' }, ctx());
    expect(await rejection(client.call('putMember', { org_id: org.id, user_id: user.id, role: 'qm', department_id: foreignDept.id }, ctx()))).toBe(
      'invalid/validation_failed',
    );

    const viewer = await client.call('createUser', { email: email() }, ctx());
    await client.call('putMember', { org_id: org.id, user_id: viewer.id, role: 'viewer' }, ctx());
    const byIds = await client.call('listMembers', { org_id: org.id, user_ids: [user.id, other.user.id] }, ctx());
    expect(byIds.members.map((m) => m.user_id)).toEqual([user.id]);
    const byRole = await client.call('listMembers', { org_id: org.id, user_ids: [], role: 'viewer' }, ctx());
    expect(byRole.members.map((m) => m.user_id)).toEqual([viewer.id]);
    const all = await client.call('listMembers', { org_id: org.id, user_ids: [] }, ctx());
    expect(all.members.map((m) => m.user_id).sort()).toEqual([user.id, viewer.id].sort());
  });

  it('rejects bad input with 400 and unknown records with 404, changing nothing', async () => {
    expect(await rejection(client.call('getOrg', { org_id: 'not-a-uuid' }, ctx()))).toBe('invalid/validation_failed');
    expect(await rejection(client.call('getOrg', { org_id: randomUUID() }, ctx()))).toBe('not_found/not_found');
    expect(await rejection(client.call('createOrg', { name: '', modules: [] }, ctx()))).toBe('invalid/validation_failed');
    const { org, user } = await orgWithMember();
    expect(await rejection(client.call('createApiKey', { org_id: org.id, name: 'k', scopes: ['read', 'sudo'], device_ids: [] }, ctx()))).toBe(
      'invalid/validation_failed',
    );
    expect(await rejection(client.call('putMember', { org_id: org.id, user_id: user.id, role: 'owner' }, ctx()))).toBe('invalid/validation_failed');
    const members = await client.call('listMembers', { org_id: org.id, user_ids: [] }, ctx());
    expect(members.members.map((m) => m.role)).toEqual(['researcher']);
    expect(await rejection(client.call('revokeToken', { token_id: randomUUID() }, ctx()))).toBe('not_found/not_found');
    expect(await rejection(client.call('deleteMember', { org_id: org.id, user_id: randomUUID() }, ctx()))).toBe('not_found/not_found');
  });

  it('resolves an API key in its embedded org, with and without a member binding', async () => {
    const { org, user } = await orgWithMember('dept_admin');
    const other = await client.call('createOrg', { name: 'Other', modules: [] }, ctx());
    const connector = randomUUID();
    const device = randomUUID();
    const key = await client.call(
      'createApiKey',
      { org_id: org.id, name: 'instrument', scopes: ['read', 'devices:register'], connector_id: connector, device_ids: [device] },
      ctx(),
    );
    expect(key.token.startsWith(`lab_${org.id.replace(/-/g, '')}_`)).toBe(true);
    expect(parseApiKeyOrg(key.token)).toBe(org.id);

    const p = await resolve(key.token);
    expect(p).toMatchObject({
      token_id: key.id,
      token_kind: 'api_key',
      org_id: org.id,
      scopes: ['read', 'devices:register'],
      connector_id: connector,
      device_ids: [device],
      modules: ['lab_equipment'],
      rate_limit: { per_minute: 120, per_hour: 5000 },
      org_bound: true,
    });
    expect(p.role).toBeUndefined();
    expect(p.user_id).toBeUndefined();
    expect((await resolve(key.token, org.id)).org_id).toBe(org.id);
    expect(await rejection(resolve(key.token, other.id))).toBe('forbidden/org_mismatch');

    const asMember = await client.call('createApiKey', { org_id: org.id, name: 'acting', scopes: ['write'], user_id: user.id, device_ids: [] }, ctx());
    expect(await resolve(asMember.token)).toMatchObject({ user_id: user.id, role: 'dept_admin', org_bound: true });

    const outsider = await client.call('createUser', { email: email() }, ctx());
    expect(await rejection(client.call('createApiKey', { org_id: org.id, name: 'x', scopes: ['read'], user_id: outsider.id, device_ids: [] }, ctx()))).toBe(
      'invalid/not_a_member',
    );
    expect(await rejection(client.call('createApiKey', { org_id: randomUUID(), name: 'x', scopes: ['read'], device_ids: [] }, ctx()))).toBe(
      'not_found/not_found',
    );
    expect(await rejection(resolve(`${key.token}x`))).toBe('unauthenticated/unauthorized');
  });

  it('resolves bound and unbound PATs by org selection and membership', async () => {
    const { org, user } = await orgWithMember('admin');
    const second = await client.call('createOrg', { name: 'Second', modules: [] }, ctx());
    await client.call('putMember', { org_id: second.id, user_id: user.id, role: 'viewer' }, ctx());
    const stranger = await client.call('createOrg', { name: 'Stranger', modules: [] }, ctx());

    const bound = await client.call('createPat', { user_id: user.id, name: 'bound', scopes: ['read'], org_id: org.id }, ctx());
    expect(bound.token).toMatch(/^pat_/);
    expect(bound.org_id).toBe(org.id);
    expect(await resolve(bound.token)).toMatchObject({ token_kind: 'pat', org_id: org.id, role: 'admin', org_bound: true });
    expect(await rejection(resolve(bound.token, second.id))).toBe('forbidden/org_mismatch');

    const unbound = await client.call('createPat', { user_id: user.id, name: 'unbound', scopes: ['*'] }, ctx());
    expect(unbound.org_id).toBeUndefined();
    expect(await rejection(resolve(unbound.token))).toBe('invalid/org_required');
    expect(await resolve(unbound.token, org.id)).toMatchObject({ org_id: org.id, role: 'admin', org_bound: false, user_id: user.id });
    expect(await resolve(unbound.token, second.id)).toMatchObject({ org_id: second.id, role: 'viewer', modules: [] });
    expect(await rejection(resolve(unbound.token, stranger.id))).toBe('forbidden/not_a_member');
    expect(await rejection(resolve(unbound.token, randomUUID()))).toBe('forbidden/not_a_member');

    expect(await rejection(client.call('createPat', { user_id: user.id, name: 'x', scopes: ['read'], org_id: stranger.id }, ctx()))).toBe(
      'invalid/not_a_member',
    );
    expect(await rejection(client.call('createPat', { user_id: randomUUID(), name: 'x', scopes: ['read'] }, ctx()))).toBe('not_found/not_found');
  });

  it('stops a revoked token at once and announces it on the bus exactly once', async () => {
    const { org, user } = await orgWithMember();
    const key = await client.call('createApiKey', { org_id: org.id, name: 'k', scopes: ['read'], device_ids: [] }, ctx());
    const pat = await client.call('createPat', { user_id: user.id, name: 'p', scopes: ['read'] }, ctx());
    await resolve(key.token);

    await client.call('revokeToken', { token_id: key.id }, ctx());
    expect(await rejection(resolve(key.token))).toBe('unauthenticated/unauthorized');
    expect((await resolve(pat.token, org.id)).token_id).toBe(pat.id);
    await client.call('revokeToken', { token_id: key.id }, ctx()); // already revoked: nothing more to announce

    const revoked = await nextMessage((m) => m.type === 'identity.token.revoked' && (m.data as { token_id: string }).token_id === key.id);
    expect(revoked.org_id).toBe(org.id);
    // One relay publishes in commit order: once a later write's event is here, any duplicate would be too.
    await client.call('updateOrg', { org_id: org.id, name: 'Renamed' }, ctx());
    await nextMessage((m) => m.type === 'identity.org.updated' && (m.data as { org_id: string }).org_id === org.id);
    const copies = seen.filter((m) => m.type === 'identity.token.revoked' && (m.data as { token_id: string }).token_id === key.id);
    expect(copies).toHaveLength(1);
  });

  it('stops tokens acting as a member once the member is removed', async () => {
    const { org, user } = await orgWithMember('researcher');
    const key = await client.call('createApiKey', { org_id: org.id, name: 'acting', scopes: ['read'], user_id: user.id, device_ids: [] }, ctx());
    const pat = await client.call('createPat', { user_id: user.id, name: 'p', scopes: ['read'] }, ctx());
    expect((await resolve(key.token)).role).toBe('researcher');

    await client.call('deleteMember', { org_id: org.id, user_id: user.id }, ctx());
    expect(await rejection(resolve(key.token))).toBe('forbidden/not_a_member');
    expect(await rejection(resolve(pat.token, org.id))).toBe('forbidden/not_a_member');
    const removed = await nextMessage((m) => m.type === 'identity.member.removed' && (m.data as { user_id: string }).user_id === user.id);
    expect(removed).toMatchObject({ org_id: org.id, data: { org_id: org.id, user_id: user.id } });

    await client.call('putMember', { org_id: org.id, user_id: user.id, role: 'viewer' }, ctx());
    expect((await resolve(key.token)).role).toBe('viewer');
  });

  it('signs users in with a password and never lets a refresh token act as a bearer', async () => {
    const { org, user } = await orgWithMember('qm', 'correct horse battery');
    const found = await client.call('getUser', { user_id: user.id }, ctx());
    const s = await client.call('passwordGrant', { email: found.email.toLowerCase(), password: 'correct horse battery' }, ctx());
    expect(s).toMatchObject({ expires_in: 3600, user_id: user.id });
    expect(s.access_token).toMatch(/^ses_/);
    expect(s.refresh_token).toMatch(/^ref_/);

    expect(await resolve(s.access_token, org.id)).toMatchObject({ token_kind: 'session', user_id: user.id, role: 'qm', org_bound: false });
    expect(await rejection(resolve(s.access_token))).toBe('invalid/org_required');
    expect(await rejection(resolve(s.refresh_token, org.id))).toBe('unauthenticated/unauthorized');

    expect(await rejection(client.call('passwordGrant', { email: found.email, password: 'wrong horse battery' }, ctx()))).toBe('invalid/invalid_grant');
    expect(await rejection(client.call('passwordGrant', { email: email(), password: 'correct horse battery' }, ctx()))).toBe('invalid/invalid_grant');
    const noPassword = await client.call('createUser', { email: email() }, ctx());
    expect(await rejection(client.call('passwordGrant', { email: noPassword.email, password: 'anything' }, ctx()))).toBe('invalid/invalid_grant');
  });

  it('rotates refresh tokens and ends the session when a used one comes back', async () => {
    const { org, user } = await orgWithMember('researcher', 'correct horse battery');
    const { email: address } = await client.call('getUser', { user_id: user.id }, ctx());
    const first = await client.call('passwordGrant', { email: address, password: 'correct horse battery' }, ctx());

    const second = await client.call('refreshGrant', { refresh_token: first.refresh_token }, ctx());
    expect(second.refresh_token).not.toBe(first.refresh_token);
    expect(second.user_id).toBe(user.id);
    expect(await rejection(resolve(first.access_token, org.id))).toBe('unauthenticated/unauthorized');
    expect((await resolve(second.access_token, org.id)).user_id).toBe(user.id);

    expect(await rejection(client.call('refreshGrant', { refresh_token: first.refresh_token }, ctx()))).toBe('invalid/invalid_grant');
    // The replay revoked the session the stolen token belonged to.
    expect(await rejection(resolve(second.access_token, org.id))).toBe('unauthenticated/unauthorized');
    expect(await rejection(client.call('refreshGrant', { refresh_token: second.refresh_token }, ctx()))).toBe('invalid/invalid_grant');
    expect(await rejection(client.call('refreshGrant', { refresh_token: 'ref_unknown' }, ctx()))).toBe('invalid/invalid_grant');
  });

  it('revokes the whole sign-in session when one of its tokens is revoked', async () => {
    const { org, user } = await orgWithMember('researcher', 'correct horse battery');
    const { email: address } = await client.call('getUser', { user_id: user.id }, ctx());
    const s = await client.call('passwordGrant', { email: address, password: 'correct horse battery' }, ctx());
    const p = await resolve(s.access_token, org.id);
    await client.call('revokeToken', { token_id: p.token_id }, ctx());
    expect(await rejection(resolve(s.access_token, org.id))).toBe('unauthenticated/unauthorized');
    expect(await rejection(client.call('refreshGrant', { refresh_token: s.refresh_token }, ctx()))).toBe('invalid/invalid_grant');
  });

  // A refresh and a revocation of the same session at the same moment: whichever
  // commits first, nothing of the session is left alive, and neither deadlocks (500).
  it('leaves no live token when a session is refreshed and revoked at the same moment', async () => {
    const { org, user } = await orgWithMember('researcher', 'correct horse battery');
    const { email: address } = await client.call('getUser', { user_id: user.id }, ctx());
    for (let round = 0; round < 15; round++) {
      const s = await client.call('passwordGrant', { email: address, password: 'correct horse battery' }, ctx());
      const p = await resolve(s.access_token, org.id);
      const [refreshed, revoked] = await Promise.allSettled([
        client.call('refreshGrant', { refresh_token: s.refresh_token }, ctx()),
        client.call('revokeToken', { token_id: p.token_id }, ctx()),
      ]);
      expect(revoked.status).toBe('fulfilled');
      if (refreshed.status === 'rejected') expect(await rejection(Promise.reject(refreshed.reason as Error))).toBe('invalid/invalid_grant');
      else expect(await rejection(resolve(refreshed.value.access_token, org.id))).toBe('unauthenticated/unauthorized');
      expect(await rejection(resolve(s.access_token, org.id))).toBe('unauthenticated/unauthorized');
    }
  });

  it('verifies a re-entered password', async () => {
    const { user } = await orgWithMember('researcher', 'correct horse battery');
    expect(await client.call('verifyPassword', { user_id: user.id, password: 'correct horse battery' }, ctx())).toEqual({});
    expect(await rejection(client.call('verifyPassword', { user_id: user.id, password: 'nope' }, ctx()))).toBe('unauthenticated/invalid_password');
    expect(await rejection(client.call('verifyPassword', { user_id: randomUUID(), password: 'nope' }, ctx()))).toBe('unauthenticated/invalid_password');
  });

  it('deletes a department and puts a member into it at the same moment: one wins, the other is refused, never a foreign key error', async () => {
    const outcomes = new Set<string>();
    for (let i = 0; i < 8; i++) {
      const { org, user } = await orgWithMember();
      const dept = await client.call('createDepartment', { org_id: org.id, name: `D${i}` }, ctx());
      const [del, put] = await Promise.all([
        rejection(client.call('deleteDepartment', { org_id: org.id, department_id: dept.id }, ctx())),
        rejection(client.call('putMember', { org_id: org.id, user_id: user.id, role: 'researcher', department_id: dept.id }, ctx())),
      ]);
      outcomes.add(`${del} ${put}`);
      // whichever came first, the other saw it: a department with a member is never deleted
      expect([`${del} ${put}`]).toEqual([expect.stringMatching(/^(ok invalid\/validation_failed|conflict\/department_in_use ok)$/)]);
      const members = await client.call('listMembersPage', { org_id: org.id, page: { limit: 10, offset: 0 } }, ctx());
      const listed = await client.call('listDepartments', { org_id: org.id, page: { limit: 10, offset: 0 }, department_ids: [] }, ctx());
      if (del === 'ok') expect([members.members[0]!.department_id, listed.departments]).toEqual([undefined, []]);
      else expect(members.members[0]!.department_id).toBe(dept.id);
    }
  });

  it('lists only the departments asked for by id, of the organisation asked for', async () => {
    const { org } = await orgWithMember();
    const { org: other } = await orgWithMember();
    const [d1, d2] = [
      await client.call('createDepartment', { org_id: org.id, name: 'D1' }, ctx()),
      await client.call('createDepartment', { org_id: org.id, name: 'D2' }, ctx()),
    ];
    const theirs = await client.call('createDepartment', { org_id: other.id, name: 'D3' }, ctx());
    const asked = [d2.id.toUpperCase(), theirs.id, randomUUID()];
    const listed = await client.call('listDepartments', { org_id: org.id, page: { limit: 10, offset: 0 }, department_ids: asked }, ctx());
    expect(listed.departments.map((d) => d.id)).toEqual([d2.id]);
    const all = await client.call('listDepartments', { org_id: org.id, page: { limit: 10, offset: 0 }, department_ids: [] }, ctx());
    expect(all.departments.map((d) => d.id)).toEqual([d1.id, d2.id]);
  });

  it('registers public clients that authenticate only without a secret, need PKCE S256 and a resource, and get resource-bound tokens', async () => {
    const { org, user } = await orgWithMember('researcher');
    const redirect = 'http://127.0.0.1:7777/cb';
    const resource = 'https://lab.example/functions/v1/mcp';
    const pub = await client.call('registerPublicOAuthClient', { name: 'mcp', redirect_uris: [redirect], scopes: [] }, ctx());
    expect(pub).toMatchObject({ public: true, scopes: ['read'], redirect_uris: [redirect] });
    expect(await client.call('getOAuthClient', { client_id: pub.client_id }, ctx())).toMatchObject({ public: true });

    const verifier = 'v'.repeat(43);
    const challenge = createHash('sha256').update(verifier).digest('base64url');
    const code = (extra: Record<string, string>) =>
      client.call('createOAuthCode', { client_id: pub.client_id, redirect_uri: redirect, user_id: user.id, org_id: org.id, scopes: [], ...extra }, ctx());
    expect(await rejection(code({ resource }))).toBe('invalid/invalid_request');
    expect(await rejection(code({ code_challenge: challenge, code_challenge_method: 'plain', resource }))).toBe('invalid/invalid_request');
    expect(await rejection(code({ code_challenge: challenge, code_challenge_method: 'S256' }))).toBe('invalid/invalid_request');
    const c = await code({ code_challenge: challenge, code_challenge_method: 'S256', resource });

    const asPublic = { client_id: pub.client_id, client_secret: '', public: true };
    const exchange = (auth: typeof asPublic) =>
      client.call('exchangeOAuthCode', { client: auth, code: c.code, redirect_uri: redirect, code_verifier: verifier, resource }, ctx());
    // the spec's token endpoint authenticates confidential clients only: a public client fails there, secret or not
    expect(await rejection(exchange({ ...asPublic, public: false }))).toBe('unauthenticated/invalid_client');
    expect(await rejection(exchange({ ...asPublic, client_secret: 'x' }))).toBe('unauthenticated/invalid_client');
    const t = await exchange(asPublic);
    expect(await resolve(t.access_token)).toMatchObject({ token_kind: 'oauth', org_id: org.id, audience: resource });
    expect(
      await rejection(
        client.call('refreshOAuthToken', { client: asPublic, refresh_token: t.refresh_token, scopes: [], resource: 'https://elsewhere.example/' }, ctx()),
      ),
    ).toBe('invalid/invalid_target');

    // a confidential client cannot bind a resource, nor authenticate as public
    const conf = await client.call('createOAuthClient', { name: 'web', redirect_uris: [redirect], scopes: [] }, ctx());
    const confCode = (extra: Record<string, string>) =>
      client.call('createOAuthCode', { client_id: conf.client_id, redirect_uri: redirect, user_id: user.id, org_id: org.id, scopes: [], ...extra }, ctx());
    expect(await rejection(confCode({ resource }))).toBe('invalid/invalid_request');
    const cc = await confCode({});
    expect(
      await rejection(
        client.call(
          'exchangeOAuthCode',
          { client: { client_id: conf.client_id, client_secret: '', public: true }, code: cc.code, redirect_uri: redirect },
          ctx(),
        ),
      ),
    ).toBe('unauthenticated/invalid_client');
    const ct = await client.call(
      'exchangeOAuthCode',
      { client: { client_id: conf.client_id, client_secret: conf.client_secret, public: false }, code: cc.code, redirect_uri: redirect },
      ctx(),
    );
    expect((await resolve(ct.access_token)).audience).toBeUndefined();
  });

  it('keeps one public client per metadata document URL, brought up to date with the document, and finds it by the URL', async () => {
    const url = `https://app.example/${randomUUID()}/client.json`;
    const doc = (name: string, redirects: string[]) =>
      client.call('registerPublicOAuthClient', { name, redirect_uris: redirects, scopes: [], metadata_url: url }, ctx());
    const first = await doc('App', ['http://127.0.0.1:7777/cb']);
    const again = await doc('App', ['http://127.0.0.1:7777/cb']);
    expect(again).toEqual(first);
    const changed = await doc('App 2', ['https://app.example/cb']);
    expect(changed).toMatchObject({ client_id: first.client_id, name: 'App 2', redirect_uris: ['https://app.example/cb'], public: true });
    expect(await client.call('getOAuthClient', { client_id: url }, ctx())).toMatchObject({ client_id: first.client_id, name: 'App 2', metadata_url: url });
    // the URL must be https; a confidential client never has one
    expect(
      await rejection(
        client.call(
          'registerPublicOAuthClient',
          { name: 'x', redirect_uris: ['https://a.example/cb'], scopes: [], metadata_url: 'http://app.example/c.json' },
          ctx(),
        ),
      ),
    ).toBe('invalid/validation_failed');
    // deleted, the URL is free again: a new client, as a registration after a deletion
    await client.call('deleteOAuthClient', { client_id: first.client_id }, ctx());
    expect(await rejection(client.call('getOAuthClient', { client_id: url }, ctx()))).toBe('not_found/invalid_client');
    expect((await doc('App', ['https://app.example/cb'])).client_id).not.toBe(first.client_id);
  });
});

describe('the management RPCs', () => {
  /** A call's outcome as the peer saw it: the gRPC status and the envelope's code. */
  async function refusal(p: Promise<unknown>): Promise<string> {
    try {
      await p;
    } catch (err) {
      if (err instanceof DomainError) return `${err.upstream?.grpc_code ?? 'local'}/${err.code}`;
      throw err;
    }
    return 'ok';
  }

  it('refuses every caller but the operator itself, before reading the request, changing nothing', async () => {
    const { org, user } = await orgWithMember('admin');
    const admin: CallerContext = {
      org_id: org.id,
      user_id: user.id,
      role: 'admin',
      department_id: null,
      scopes: ['*'],
      token_kind: 'session',
      token_id: randomUUID(),
      request_id: randomUUID(),
    };
    const callers = { admin, api_key: { ...admin, user_id: null, role: null, token_kind: 'api_key' }, system: systemContext(randomUUID(), org.id) };
    for (const [who, caller] of Object.entries(callers)) {
      for (const method of MANAGEMENT_ONLY) {
        // the method's empty request: the check comes before validation, so it is what answers
        const empty = identity.IdentityServiceService[method].requestDeserialize(Buffer.alloc(0));
        expect([who, method, await refusal(client.call(method, empty as never, caller))]).toEqual([who, method, 'PERMISSION_DENIED/operator_only']);
      }
      // a well-formed call is refused as well, and leaves the member where it was
      expect(await refusal(client.call('deleteMember', { org_id: org.id, user_id: user.id }, caller))).toBe('PERMISSION_DENIED/operator_only');
      expect(await refusal(client.call('createOrg', { name: `by ${who}`, modules: [] }, caller))).toBe('PERMISSION_DENIED/operator_only');
    }
    const members = await client.call('listMembersPage', { org_id: org.id, page: { limit: 10, offset: 0 } }, ctx());
    expect(members.members.map((m) => [m.user_id, m.role])).toEqual([[user.id, 'admin']]);
    // and the reads the gateway makes for /v1 callers stay open to them
    expect((await client.call('getOrg', { org_id: org.id }, admin)).id).toBe(org.id);
    expect((await client.call('listMembers', { org_id: org.id, user_ids: [user.id] }, admin)).members).toHaveLength(1);
  });
});
