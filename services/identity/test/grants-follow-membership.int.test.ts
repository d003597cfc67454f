import { randomUUID } from 'node:crypto';
import { DomainError, RpcClient, operatorContext, type BusMessage } from '@lab/kit';
import { identity } from '@lab/contracts';
import { definition, hashToken } from '@lab/identity';
import { waitFor } from '@lab/testing/waits';
import { startTestService, type TestService } from '@lab/testing';

/**
 * OAuth grants end with the membership they were consented under, or with a
 * lowered role (decision 050), in the transaction of the membership change: what
 * the audit log and the gateways' caches are told, and a consent racing a removal.
 * (Over HTTP: services/gateway/test/grants-follow-membership.e2e.test.ts.)
 */
const REDIRECT = 'https://client.example.test/cb';

let service: TestService;
let client: RpcClient<typeof identity.IdentityServiceService>;
let lims: { client_id: string; client_secret: string };
/** Every message of the test exchange (events and audit records), in arrival order. */
let seen: BusMessage[];

beforeAll(async () => {
  service = await startTestService(definition);
  seen = service.events.received;
  client = new RpcClient(identity.IdentityServiceClient, service.svc.address, { secret: service.secret });
  lims = await client.call('createOAuthClient', { name: 'lims', redirect_uris: [REDIRECT], scopes: ['read', 'write'] }, ctx());
});

afterAll(async () => {
  client?.close();
  await service?.stop();
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

async function member(role: string) {
  const org = await client.call('createOrg', { name: 'Lab', modules: [] }, ctx());
  const user = await client.call('createUser', { email: `g-${randomUUID()}@example.org` }, ctx());
  await client.call('putMember', { org_id: org.id, user_id: user.id, role }, ctx());
  return { org, user };
}

const consent = (orgId: string, userId: string) =>
  client.call('createOAuthCode', { client_id: lims.client_id, redirect_uri: REDIRECT, user_id: userId, org_id: orgId, scopes: [] }, ctx());
const exchange = (code: string) => client.call('exchangeOAuthCode', { client: { ...lims, public: false }, code, redirect_uri: REDIRECT }, ctx());
const refresh = (refreshToken: string) =>
  client.call('refreshOAuthToken', { client: { ...lims, public: false }, refresh_token: refreshToken, scopes: [] }, ctx());

/** The audit entries of the ended grants of `userId` (the create entry names the user, the revoke entry the grant). */
async function grantEndings(userId: string, count: number): Promise<{ record_id: string; after: unknown }[]> {
  return waitFor(`${count} grant revocations audited`, () => {
    const grants = new Set(
      seen
        .filter((m) => m.type === 'audit.record')
        .map((m) => m.data as { action: string; resource: string; record_id: string; after?: { user_id?: string } })
        .filter((d) => d.resource === 'oauth_grant' && d.action === 'create' && d.after?.user_id === userId)
        .map((d) => d.record_id),
    );
    const ended = seen
      .filter((m) => m.type === 'audit.record')
      .map((m) => m.data as { action: string; resource: string; record_id: string; after: unknown })
      .filter((d) => d.resource === 'oauth_grant' && d.action === 'revoke' && grants.has(d.record_id));
    return ended.length >= count ? ended : undefined;
  });
}

describe('grants and the membership', () => {
  it("ends a removed member's grants in one transaction: audited with the reason, each token's revocation announced", async () => {
    const { org, user } = await member('researcher');
    const first = await exchange((await consent(org.id, user.id)).code);
    const second = await exchange((await consent(org.id, user.id)).code);
    const accessIds = await Promise.all(
      [first, second].map(async (t) => (await client.call('resolveToken', { token_hash: hashToken(t.access_token), org_id: org.id }, ctx())).token_id),
    );

    await client.call('deleteMember', { org_id: org.id, user_id: user.id }, ctx());
    const ended = await grantEndings(user.id, 2);
    expect(ended.map((e) => e.after)).toEqual([
      { revoked: true, reason: 'member_removed' },
      { revoked: true, reason: 'member_removed' },
    ]);
    await waitFor('the access tokens announced revoked', () =>
      accessIds.every((id) => seen.some((m) => m.type === 'identity.token.revoked' && (m.data as { token_id: string }).token_id === id)) ? true : undefined,
    );
    for (const t of [first, second]) expect(await rejection(refresh(t.refresh_token))).toBe('invalid/invalid_grant');
    expect(await rejection(client.call('resolveToken', { token_hash: hashToken(first.access_token), org_id: org.id }, ctx()))).toBe(
      'unauthenticated/unauthorized',
    );
  });

  it('ends the grants when the role loses an action, either way between roles that are not a ladder', async () => {
    for (const [from, to] of [
      ['admin', 'qm'],
      ['researcher', 'dept_admin'],
      ['dept_admin', 'researcher'],
      ['researcher', 'viewer'],
    ] as const) {
      const { org, user } = await member(from);
      const t = await exchange((await consent(org.id, user.id)).code);
      await client.call('putMember', { org_id: org.id, user_id: user.id, role: to }, ctx());
      expect([from, to, await rejection(refresh(t.refresh_token))]).toEqual([from, to, 'invalid/invalid_grant']);
      expect((await grantEndings(user.id, 1)).map((e) => e.after)).toEqual([{ revoked: true, reason: 'role_lowered' }]);
    }
    for (const [from, to] of [
      ['researcher', 'researcher'],
      ['researcher', 'qm'],
      ['viewer', 'admin'],
    ] as const) {
      const { org, user } = await member(from);
      const t = await exchange((await consent(org.id, user.id)).code);
      await client.call('putMember', { org_id: org.id, user_id: user.id, role: to }, ctx());
      expect([from, to, await rejection(refresh(t.refresh_token))]).toEqual([from, to, 'ok']);
    }
  });

  // Consent reads the membership, removal ends the grants it finds: unlocked, a consent
  // could read the member, the removal commit finding no grant, and the consent then
  // commit a grant of a non-member. Consent locks the membership row.
  it('leaves no working grant when a consent races the removal', async () => {
    for (let i = 0; i < 15; i++) {
      const { org, user } = await member('researcher');
      const [code] = await Promise.allSettled([consent(org.id, user.id), client.call('deleteMember', { org_id: org.id, user_id: user.id }, ctx())]);
      if (code.status === 'fulfilled') expect(await rejection(exchange(code.value.code))).toBe('invalid/invalid_grant');
      else expect(code.reason).toMatchObject({ code: 'not_a_member' });
    }
  });

  // a refresh takes the grant's lock, the removal too: whichever comes second sees the first's work
  it('leaves no working token when a refresh races the removal', async () => {
    for (let i = 0; i < 15; i++) {
      const { org, user } = await member('researcher');
      const t = await exchange((await consent(org.id, user.id)).code);
      const [rotated] = await Promise.allSettled([refresh(t.refresh_token), client.call('deleteMember', { org_id: org.id, user_id: user.id }, ctx())]);
      if (rotated.status === 'fulfilled') {
        expect(await rejection(refresh(rotated.value.refresh_token))).toBe('invalid/invalid_grant');
        expect(await rejection(client.call('resolveToken', { token_hash: hashToken(rotated.value.access_token), org_id: org.id }, ctx()))).toBe(
          'unauthenticated/unauthorized',
        );
      } else expect(rotated.reason).toMatchObject({ code: 'invalid_grant' });
    }
  });
});
