import { startStack, type Stack } from '@lab/testing';
import { call } from './http';

let stack: Stack;
let orgId: string;
let signerId: string;
let email: string;
const password = 'a long enough password';

beforeAll(async () => {
  stack = await startStack();
  orgId = (await stack.admin.createOrg()).id;
  email = `signer-${Date.now()}@example.test`;
  const user = await stack.admin.createUser({ email, password, name: 'Signer' });
  await stack.admin.putMember(orgId, user.id, 'researcher');
  signerId = user.id;
});

afterAll(async () => {
  await stack?.stop();
});

const grant = (body: unknown) => call(stack.url, 'POST', '/auth/v1/token', { body });

describe('POST /auth/v1/token', () => {
  it('issues tokens for a password and refreshes them', async () => {
    const r = await grant({ grant_type: 'password', email, password });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ access_token: expect.stringMatching(/^ses_/), token_type: 'bearer', expires_in: expect.any(Number), refresh_token: expect.any(String) });
    const refreshed = await grant({ grant_type: 'refresh_token', refresh_token: r.body.refresh_token });
    expect(refreshed.status).toBe(200);
    expect(refreshed.body.access_token).not.toBe(r.body.access_token);
  });

  it('answers 400 invalid_grant for a wrong password', async () => {
    const r = await grant({ grant_type: 'password', email, password: 'wrong password!' });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('invalid_grant');
  });

  it('answers 400 validation_failed for an unknown grant type', async () => {
    const r = await grant({ grant_type: 'client_credentials' });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('validation_failed');
  });
});

describe('POST /app/v1/experiments/{id}/sign', () => {
  let access: string;
  let experimentId: string;

  beforeAll(async () => {
    access = (await grant({ grant_type: 'password', email, password })).body.access_token;
    const pat = (await stack.admin.createPat(signerId, { scopes: ['write'], org_id: orgId })).token;
    const exp = await call(stack.url, 'POST', '/v1/experiments', { token: pat, body: { title: 'to sign' } });
    expect(exp.status).toBe(201);
    experimentId = exp.body.data.id;
  });

  const sign = (body: unknown, headers: Record<string, string> = { 'x-org-id': orgId }, token = access) =>
    call(stack.url, 'POST', `/app/v1/experiments/${experimentId}/sign`, { token, body, headers });

  it('needs a user access token and an org', async () => {
    expect((await sign({ password }, { 'x-org-id': orgId }, 'pat_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx')).status).toBe(401);
    const noOrg = await sign({ password }, {});
    expect(noOrg.status).toBe(400);
    expect(noOrg.body.error.code).toBe('org_required');
  });

  it('refuses a wrong password with 403 invalid_password', async () => {
    const r = await sign({ password: 'not the password' });
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('invalid_password');
  });

  it('signs once, then answers 409', async () => {
    const r = await sign({ password });
    expect(r.status).toBe(200);
    expect(r.body.data.id).toBe(experimentId);
    expect(r.body.data.signed_at).toEqual(expect.any(String));
    const again = await sign({ password });
    expect(again.status).toBe(409);
  });
});
