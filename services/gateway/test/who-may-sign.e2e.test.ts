import { randomUUID } from 'node:crypto';
import { startStack, type Stack } from '@lab/testing';
import { call } from './http';

/**
 * Who may give which signature (docs/decisions/046-who-may-sign.md), end to end
 * over HTTP: every role against every meaning. An authorship signature says "I
 * wrote this" and locks the version, so only its author who may also change it
 * gives it; review and approval are given by anyone who may sign and is not an
 * author of the entry.
 */

let stack: Stack;
let orgId: string;
let departmentId: string;
const password = 'a long enough password';

interface Member {
  name: string;
  id: string;
  /** a sign-in session: what signing needs */
  session: string;
  /** a personal access token for the public API */
  pat: string;
}

/** The author, and one member of every role, each of whom is not an author of the author's drafts. */
let author: Member;
let admin: Member;
let deptAdmin: Member;
/** a researcher of the author's department: may change the author's drafts there */
let colleague: Member;
/** a researcher without a department: sees the author's drafts without one, may not change them */
let outsider: Member;
/** reads every department, changes only its own (and its department's, having none) */
let qm: Member;
let viewer: Member;

async function member(name: string, role: string, department?: string): Promise<Member> {
  const email = `${name}-${randomUUID()}@example.test`;
  const user = await stack.admin.createUser({ email, password, name });
  await stack.admin.putMember(orgId, user.id, role, department);
  const signIn = await call(stack.url, 'POST', '/auth/v1/token', { body: { grant_type: 'password', email, password } });
  expect(signIn.status).toBe(200);
  const pat = (await stack.admin.createPat(user.id, { scopes: ['read', 'write'], org_id: orgId })).token;
  return { name, id: user.id, session: signIn.body.access_token, pat };
}

beforeAll(async () => {
  stack = await startStack();
  // many calls in a minute: the organisation's rate limit is not what this tests
  orgId = (await stack.admin.createOrg({ rate_limit: { per_minute: 100_000, per_hour: 1_000_000 } })).id;
  departmentId = (await stack.admin.call<{ id: string }>('POST', `/orgs/${orgId}/departments`, { name: 'Chemistry' }, 201)).id;
  author = await member('author', 'researcher', departmentId);
  admin = await member('admin', 'admin');
  deptAdmin = await member('dept_admin', 'dept_admin', departmentId);
  colleague = await member('colleague', 'researcher', departmentId);
  outsider = await member('outsider', 'researcher');
  qm = await member('qm', 'qm');
  viewer = await member('viewer', 'viewer', departmentId);
});

afterAll(async () => {
  await stack?.stop();
});

const api = (method: string, path: string, token: string, body?: unknown) => call(stack.url, method, path, { token, body });
const sign = (id: string, who: Member, meaning?: string) =>
  call(stack.url, 'POST', `/app/v1/experiments/${id}/sign`, {
    token: who.session,
    body: { password, ...(meaning ? { meaning } : {}) },
    headers: { 'x-org-id': orgId },
  });

/** A draft of `who` (in their department unless the body names one), as created. */
async function draft(who: Member | string, body: Record<string, unknown> = {}) {
  const r = await api('POST', '/v1/experiments', typeof who === 'string' ? who : who.pat, { title: 'titration', content: { volume_ml: 12.5 }, ...body });
  expect(r.status).toBe(201);
  return r.body.data as { id: string; department_id: string | null; author_id: string | null };
}

/** A draft of the author, signed by them for authorship. */
async function authored() {
  const d = await draft(author);
  const r = await sign(d.id, author);
  expect([r.status, r.body.data?.signed_by]).toEqual([200, author.id]);
  return d;
}

/** Status and error code of each attempt, by the signer's name, for one comparison per table. */
const outcome = async (who: Member, r: Promise<{ status: number; body: any }>) => {
  const a = await r;
  return [who.name, a.status, a.body.error?.code ?? null];
};

/** The record and manifest of a version, to show a refused signing changed nothing. */
async function stateOf(id: string) {
  const record = await api('GET', `/v1/experiments/${id}`, admin.pat);
  const manifest = await api('GET', `/v1/experiments/${id}/signatures`, admin.pat);
  return { record: record.body.data, signatures: manifest.body.data };
}

describe('authorship of a draft', () => {
  it("is refused with 403 to every role but the draft's author, whether or not they may change it, and changes nothing", async () => {
    const inDepartment = await draft(author);
    const unassigned = await draft(author, { department_id: null });
    expect([inDepartment.department_id, unassigned.department_id]).toEqual([departmentId, null]);
    // admin, dept_admin and the colleague may change the draft in the department: still not theirs to sign as its author
    const same = { title: 'titration' };
    for (const who of [admin, deptAdmin, colleague]) expect((await api('PATCH', `/v1/experiments/${inDepartment.id}`, who.pat, same)).status).toBe(200);
    // the finding: a researcher refused PATCH of a colleague's draft (and a QM likewise) could sign it
    for (const who of [outsider, qm]) expect((await api('PATCH', `/v1/experiments/${unassigned.id}`, who.pat, same)).status).toBe(403);
    const before = [await stateOf(inDepartment.id), await stateOf(unassigned.id)];

    const tried = [];
    for (const who of [admin, deptAdmin, colleague, qm, viewer]) tried.push(await outcome(who, sign(inDepartment.id, who, 'authorship')));
    for (const who of [admin, deptAdmin, colleague, outsider, qm, viewer]) tried.push(await outcome(who, sign(unassigned.id, who)));
    expect(tried).toEqual([
      ['admin', 403, 'forbidden'],
      ['dept_admin', 403, 'forbidden'],
      ['colleague', 403, 'forbidden'],
      ['qm', 403, 'forbidden'],
      ['viewer', 403, 'forbidden'],
      ['admin', 403, 'forbidden'],
      ['dept_admin', 403, 'forbidden'],
      ['colleague', 403, 'forbidden'],
      ['outsider', 403, 'forbidden'],
      ['qm', 403, 'forbidden'],
      ['viewer', 403, 'forbidden'],
    ]);
    expect([await stateOf(inDepartment.id), await stateOf(unassigned.id)]).toEqual(before);

    // the author still edits the draft, then signs it
    for (const d of [inDepartment, unassigned]) {
      expect((await api('PATCH', `/v1/experiments/${d.id}`, author.pat, { title: 'titration, checked' })).status).toBe(200);
      const signed = await sign(d.id, author);
      expect(signed.status).toBe(200);
      expect(signed.body.data.signatures.map((s: { meaning: string; signer_id: string }) => [s.meaning, s.signer_id])).toEqual([['authorship', author.id]]);
    }
  });

  it('is given by the author of every role that may sign', async () => {
    for (const who of [admin, deptAdmin, colleague, outsider, qm]) {
      const d = await draft(who);
      expect(await outcome(who, sign(d.id, who))).toEqual([who.name, 200, null]);
    }
    // a viewer writes no draft of their own, and signs none
    expect((await api('POST', '/v1/experiments', viewer.pat, { title: 'mine' })).status).toBe(403);
  });

  it('of a draft made by a token without a user (no personal author) is given by whoever may change it', async () => {
    const key = (await stack.admin.createApiKey(orgId, { scopes: ['write'] })).token;
    const d = await draft(key, { department_id: departmentId });
    expect(d.author_id).toBeNull();
    const tried = [];
    for (const who of [qm, viewer, colleague]) tried.push(await outcome(who, sign(d.id, who)));
    expect(tried).toEqual([
      ['qm', 403, 'forbidden'],
      ['viewer', 403, 'forbidden'],
      ['colleague', 200, null],
    ]);
  });
});

describe('authorship of an amendment', () => {
  it('is given by whoever amended, not by the author of the version it amends nor anyone else', async () => {
    const v1 = await authored();
    const amended = await api('POST', `/v1/experiments/${v1.id}/amendments`, colleague.pat, { reason: 'burette misread', content: { volume_ml: 12.7 } });
    expect(amended.status).toBe(201);
    const v2 = amended.body.data as { id: string; author_id: string };
    expect(v2.author_id).toBe(colleague.id);
    const before = await stateOf(v2.id);

    const tried = [];
    for (const who of [author, admin, deptAdmin, outsider, qm, viewer]) tried.push(await outcome(who, sign(v2.id, who, 'authorship')));
    expect(tried).toEqual([
      ['author', 403, 'forbidden'],
      ['admin', 403, 'forbidden'],
      ['dept_admin', 403, 'forbidden'],
      ['outsider', 404, 'not_found'],
      ['qm', 403, 'forbidden'],
      ['viewer', 403, 'forbidden'],
    ]);
    expect(await stateOf(v2.id)).toEqual(before);

    expect((await api('PATCH', `/v1/experiments/${v2.id}`, colleague.pat, { title: 'titration, corrected' })).status).toBe(200);
    const signed = await sign(v2.id, colleague);
    expect([signed.status, signed.body.data.signed_by]).toEqual([200, colleague.id]);
  });
});

describe('review and approval after authorship', () => {
  it("wait for the author's own authorship signature: a refused one does not count", async () => {
    const d = await draft(author);
    expect(await outcome(colleague, sign(d.id, colleague, 'authorship'))).toEqual(['colleague', 403, 'forbidden']);
    expect(await outcome(qm, sign(d.id, qm, 'review'))).toEqual(['qm', 409, 'authorship_required']);
    expect(await outcome(qm, sign(d.id, qm, 'approval'))).toEqual(['qm', 409, 'authorship_required']);
    expect((await sign(d.id, author)).status).toBe(200);
    // the colleague who tried is no author of it: they review it
    expect(await outcome(colleague, sign(d.id, colleague, 'review'))).toEqual(['colleague', 200, null]);
    const approved = await sign(d.id, qm, 'approval');
    expect(approved.status).toBe(200);
    expect(approved.body.data.signatures.map((s: { meaning: string; signer_id: string }) => [s.meaning, s.signer_id])).toEqual([
      ['authorship', author.id],
      ['review', colleague.id],
      ['approval', qm.id],
    ]);
    expect(approved.body.data.signed_by).toBe(author.id);
  });

  it.each(['review', 'approval'])('%s is given by every role that may sign, except an author; a viewer never', async (meaning) => {
    const tried = [];
    for (const who of [admin, deptAdmin, colleague, qm]) {
      const d = await authored();
      tried.push(await outcome(author, sign(d.id, author, meaning)));
      tried.push(await outcome(viewer, sign(d.id, viewer, meaning)));
      tried.push(await outcome(who, sign(d.id, who, meaning)));
    }
    expect(tried).toEqual(
      [admin, deptAdmin, colleague, qm].flatMap((who) => [
        ['author', 403, 'signer_is_author'],
        ['viewer', 403, 'forbidden'],
        [who.name, 200, null],
      ]),
    );
  });

  it('of an amendment is refused to the authors of every version, and given by others', async () => {
    const v1 = await authored();
    const v2 = (await api('POST', `/v1/experiments/${v1.id}/amendments`, colleague.pat, { reason: 'burette misread' })).body.data as { id: string };
    expect((await sign(v2.id, colleague)).status).toBe(200);
    const tried = [];
    for (const who of [author, colleague]) tried.push(await outcome(who, sign(v2.id, who, 'review')));
    tried.push(await outcome(deptAdmin, sign(v2.id, deptAdmin, 'review')));
    tried.push(await outcome(qm, sign(v2.id, qm, 'approval')));
    expect(tried).toEqual([
      ['author', 403, 'signer_is_author'],
      ['colleague', 403, 'signer_is_author'],
      ['dept_admin', 200, null],
      ['qm', 200, null],
    ]);
  });
});
