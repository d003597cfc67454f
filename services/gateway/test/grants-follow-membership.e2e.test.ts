import { createHash, randomBytes } from 'node:crypto';
import { startStack, type Stack } from '@lab/testing';
import { call, eventually } from './http';
import { authorize, browserAuthorize, FN, token, type FlowUser } from './oauth-flow';

/**
 * An OAuth grant is consent given as a member of one organisation, in a role: it
 * must not outlive either (RFC 9700 4.14). Removing the member, or lowering
 * their role, revokes the grants' refresh and access tokens in that organisation;
 * a refresh meanwhile is invalid_grant, and nothing issued before works again
 * when the member is added back.
 */
const REDIRECT = 'http://127.0.0.1:33418/callback';
const IDP = '/auth/v1/oauth';
const password = 'a long enough password';

let stack: Stack;
let orgA: string;
let orgB: string;
const mcpUrl = () => `${stack.url}${FN}/mcp`;

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'notebook', 'audit'] });
  orgA = (await stack.admin.createOrg()).id;
  orgB = (await stack.admin.createOrg()).id;
});

afterAll(async () => {
  await stack?.stop();
});

async function member(role: string, ...orgs: string[]): Promise<FlowUser & { id: string }> {
  const u = await stack.admin.createUser({ password });
  for (const o of orgs) await stack.admin.putMember(o, u.id, role);
  return { id: u.id, email: u.email, password };
}

const idpToken = (fields: Record<string, string>) =>
  call(stack.url, 'POST', `${IDP}/token`, {
    body: new URLSearchParams(fields).toString(),
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
  });

interface Connected {
  clientId: string;
  access: string;
  refresh: string;
}

/** What an MCP client does: registers, has the user sign in and consent for `orgId`, exchanges the code. */
async function connect(user: FlowUser, orgId: string): Promise<Connected> {
  const reg = await call(stack.url, 'POST', `${IDP}/register`, { body: { client_name: 'grants e2e', redirect_uris: [REDIRECT] } });
  expect(reg.status).toBe(201);
  const clientId = reg.body.client_id as string;
  const verifier = randomBytes(32).toString('base64url');
  const challenge = createHash('sha256').update(verifier).digest('base64url');
  const url = new URL(
    `${stack.url}${IDP}/authorize?${new URLSearchParams({
      response_type: 'code',
      client_id: clientId,
      redirect_uri: REDIRECT,
      code_challenge: challenge,
      code_challenge_method: 'S256',
      resource: mcpUrl(),
      scope: 'read',
    }).toString()}`,
  );
  const done = await browserAuthorize(url, user, orgId);
  if (done.status !== 302 || !done.location) throw new Error(`authorization ended with ${done.status}: ${done.html.slice(0, 300)}`);
  const code = new URL(done.location).searchParams.get('code')!;
  const t = await idpToken({ grant_type: 'authorization_code', code, redirect_uri: REDIRECT, client_id: clientId, code_verifier: verifier });
  expect(t.status).toBe(200);
  return { clientId, access: t.body.access_token, refresh: t.body.refresh_token };
}

const refresh = (c: Connected) => idpToken({ grant_type: 'refresh_token', refresh_token: c.refresh, client_id: c.clientId });

/** The MCP function's answer to an initialize with this access token (200, or 401 once it is revoked). */
const mcpStatus = async (accessToken: string) =>
  (
    await fetch(mcpUrl(), {
      method: 'POST',
      headers: { authorization: `Bearer ${accessToken}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
      }),
    })
  ).status;

const revokedAt = async (accessToken: string) => {
  await eventually(async () => ((await mcpStatus(accessToken)) === 401 ? true : undefined), 10_000, 'the access token to be refused');
};

describe('an MCP grant and the membership it was given for', () => {
  it('ends when the member is removed: refresh is invalid_grant, and nothing comes back when they are added again', async () => {
    const user = await member('researcher', orgA);
    const c = await connect(user, orgA);
    expect(await mcpStatus(c.access)).toBe(200);

    await stack.admin.call('DELETE', `/orgs/${orgA}/members/${user.id}`, undefined, 204);
    const whileRemoved = await refresh(c);
    expect([whileRemoved.status, whileRemoved.body.error]).toEqual([400, 'invalid_grant']);
    await revokedAt(c.access);

    // back in the organisation: what was issued before stays dead
    await stack.admin.putMember(orgA, user.id, 'researcher');
    const afterReadded = await refresh(c);
    expect([afterReadded.status, afterReadded.body.error]).toEqual([400, 'invalid_grant']);
    expect(await mcpStatus(c.access)).toBe(401);
    // a new consent works as before
    const again = await connect(user, orgA);
    expect(await mcpStatus(again.access)).toBe(200);
    expect((await refresh(again)).status).toBe(200);
  });

  it('ends when the role drops, not when it rises or stays', async () => {
    const user = await member('admin', orgA);
    const c = await connect(user, orgA);
    // the same role again (a department change, say) and a raise leave the grant alone
    await stack.admin.putMember(orgA, user.id, 'admin');
    const kept = await refresh(c);
    expect(kept.status).toBe(200);
    const rotated = { ...c, access: kept.body.access_token as string, refresh: kept.body.refresh_token as string };

    await stack.admin.putMember(orgA, user.id, 'viewer');
    const dropped = await refresh(rotated);
    expect([dropped.status, dropped.body.error]).toEqual([400, 'invalid_grant']);
    await revokedAt(rotated.access);

    const viewer = await connect(user, orgA);
    await stack.admin.putMember(orgA, user.id, 'researcher');
    expect((await refresh(viewer)).status).toBe(200);
  });

  it("leaves the user's grants in other organisations alone", async () => {
    const user = await member('researcher', orgA, orgB);
    const inA = await connect(user, orgA);
    const inB = await connect(user, orgB);
    await stack.admin.call('DELETE', `/orgs/${orgA}/members/${user.id}`, undefined, 204);
    expect((await refresh(inA)).body.error).toBe('invalid_grant');
    expect(await mcpStatus(inB.access)).toBe(200);
    expect((await refresh(inB)).status).toBe(200);
  });

  it("ends a confidential client's grant too, whose tokens act on /v1", async () => {
    const user = await member('researcher', orgA);
    const client = await stack.admin.call<{ client_id: string; client_secret: string }>(
      'POST',
      '/oauth-clients',
      { name: 'lims', redirect_uris: [REDIRECT], scopes: ['read', 'write'] },
      201,
    );
    const loc = await authorize(stack.url, { client_id: client.client_id, redirect_uri: REDIRECT, scope: 'read write' }, user, orgA);
    const t = await token(stack.url, client, { grant_type: 'authorization_code', code: loc.searchParams.get('code')!, redirect_uri: REDIRECT });
    expect(t.status).toBe(200);
    await stack.admin.call('DELETE', `/orgs/${orgA}/members/${user.id}`, undefined, 204);
    const r = await token(stack.url, client, { grant_type: 'refresh_token', refresh_token: t.body.refresh_token });
    expect([r.status, r.body.error]).toEqual([400, 'invalid_grant']);
    await stack.admin.putMember(orgA, user.id, 'researcher');
    await eventually(async () => ((await call(stack.url, 'GET', '/v1/ping', { token: t.body.access_token })).status === 401 ? true : undefined));
  });
});
