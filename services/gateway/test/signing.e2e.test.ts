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
    expect(r.body).toEqual({
      access_token: expect.stringMatching(/^ses_/),
      token_type: 'bearer',
      expires_in: expect.any(Number),
      refresh_token: expect.any(String),
    });
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

describe('signed experiments over HTTP', () => {
  let author: { pat: string; session: string; id: string };
  let reviewer: { session: string; id: string };

  /** A member of the org with a sign-in session (and a PAT for the public API). */
  async function member(name: string) {
    const mail = `${name.toLowerCase().replace(/\W/g, '-')}-${Date.now()}@example.test`;
    const user = await stack.admin.createUser({ email: mail, password, name });
    await stack.admin.putMember(orgId, user.id, 'researcher');
    const session = (await grant({ grant_type: 'password', email: mail, password })).body.access_token;
    const pat = (await stack.admin.createPat(user.id, { scopes: ['read', 'write'], org_id: orgId })).token;
    return { id: user.id, session, pat };
  }

  beforeAll(async () => {
    author = await member('Ada Author');
    reviewer = await member('Rita Reviewer');
  });

  const api = (method: string, path: string, body?: unknown, token = author.pat) => call(stack.url, method, path, { token, body });
  const signAs = (id: string, token: string, body: Record<string, unknown> = {}) =>
    call(stack.url, 'POST', `/app/v1/experiments/${id}/sign`, { token, body: { password, ...body }, headers: { 'x-org-id': orgId } });

  async function signedExperiment() {
    const created = await api('POST', '/v1/experiments', { title: 'titration', content: { volume_ml: 12.5 } });
    expect(created.status).toBe(201);
    const signed = await signAs(created.body.data.id, author.session);
    expect(signed.status).toBe(200);
    return signed.body.data;
  }

  it('refuses PATCH, PUT and DELETE of a signed experiment with 409 experiment_signed, and changes nothing', async () => {
    const signed = await signedExperiment();
    const { signatures: _m, ...record } = signed;
    for (const [method, body] of [
      ['PATCH', { title: 'edited' }],
      ['PUT', { content: {} }],
      ['DELETE', undefined],
    ] as const) {
      const r = await api(
        method,
        `/v1/experiments/${signed.id}`,
        body,
        method === 'DELETE' ? (await stack.admin.createApiKey(orgId, { scopes: ['admin'] })).token : author.pat,
      );
      expect([method, r.status, r.body.error.code]).toEqual([method, 409, 'experiment_signed']);
    }
    const after = await api('GET', `/v1/experiments/${signed.id}`);
    expect(after.body.data).toEqual(record);
  });

  it('amends with a reason into a linked version and keeps the signed one as signed', async () => {
    const signed = await signedExperiment();
    const missing = await api('POST', `/v1/experiments/${signed.id}/amendments`, { content: { volume_ml: 12.7 } });
    expect([missing.status, missing.body.error.code, missing.body.error.details.field]).toEqual([400, 'validation_failed', 'reason']);
    const amended = await api('POST', `/v1/experiments/${signed.id}/amendments`, { reason: 'burette misread', content: { volume_ml: 12.7 } });
    expect(amended.status).toBe(201);
    expect(amended.body.data).toMatchObject({
      version: 2,
      amends_id: signed.id,
      amendment_reason: 'burette misread',
      display_id: signed.display_id,
      signed_at: null,
    });
    const history = await api('GET', `/v1/experiments/${amended.body.data.id}/versions`);
    expect(history.status).toBe(200);
    expect(history.body.data.map((v: { id: string }) => v.id)).toEqual([signed.id, amended.body.data.id]);
    expect(history.body.data[0].content).toEqual({ volume_ml: 12.5 });
    expect(history.body.pagination).toEqual({ limit: 2, offset: 0, total: 2 });
    const again = await api('POST', `/v1/experiments/${signed.id}/amendments`, { reason: 'twice' });
    expect([again.status, again.body.error.code]).toEqual([409, 'already_amended']);
  });

  it('shows a manifest with meanings, names and content hash; refuses an author as reviewer', async () => {
    const signed = await signedExperiment();
    const self = await signAs(signed.id, author.session, { meaning: 'review' });
    expect([self.status, self.body.error.code]).toEqual([403, 'signer_is_author']);
    const bad = await signAs(signed.id, reviewer.session, { meaning: 'notary' });
    expect([bad.status, bad.body.error.code]).toEqual([400, 'validation_failed']);
    const reviewed = await signAs(signed.id, reviewer.session, { meaning: 'review' });
    expect(reviewed.status).toBe(200);
    const twice = await signAs(signed.id, reviewer.session, { meaning: 'review' });
    expect([twice.status, twice.body.error.code]).toEqual([409, 'already_signed']);

    const manifest = await api('GET', `/v1/experiments/${signed.id}/signatures`);
    expect(manifest.status).toBe(200);
    expect(manifest.body.data).toEqual([
      expect.objectContaining({
        meaning: 'authorship',
        signer_id: author.id,
        signer_name: 'Ada Author',
        content_hash: signed.signatures[0].content_hash,
        content_matches: true,
      }),
      expect.objectContaining({
        meaning: 'review',
        signer_id: reviewer.id,
        signer_name: 'Rita Reviewer',
        content_hash: signed.signatures[0].content_hash,
        content_matches: true,
      }),
    ]);
    expect(manifest.body.data[1].signed_at).toEqual(expect.stringMatching(/^\d{4}-\d\d-\d\dT/));
    expect(reviewed.body.data.signatures).toEqual(manifest.body.data);
  });
});
