import { sql } from 'drizzle-orm';
import { experimentJson, notebook, recordObject, records, recordsWire, signatureObject, signedExperimentJson } from '@lab/contracts';
import { metrics, Receipts, RpcClient, newId, type BusMessage, type CallerContext, type DomainError } from '@lab/kit';
import { definition } from '@lab/notebook';
import { holdTransaction, startReferenceOwners, startTestService, waitFor, type ReferenceOwners, type TestService } from '@lab/testing';

let t: TestService;
let rec: RpcClient<typeof records.RecordServiceService>;
let nb: RpcClient<typeof notebook.NotebookServiceService>;
let received: BusMessage[];
/** identity, where the departments and members that references name live */
let owners: ReferenceOwners;

beforeAll(async () => {
  owners = await startReferenceOwners(['identity']);
  t = await startTestService(definition, { bindings: ['experiment.#', 'sample.#', 'project.#', 'audit.record'], peers: owners.peers });
  received = t.events.received;
  rec = new RpcClient(recordsWire.Client, t.svc.address, { secret: t.secret });
  nb = new RpcClient(notebook.NotebookServiceClient, t.svc.address, { secret: t.secret });
});

afterAll(async () => {
  rec?.close();
  nb?.close();
  await owners?.stop();
  await t?.stop();
});

type Json = Record<string, any>;

/** A world of one organisation: its admin, members by role, and tokens without a user. */
function org(ids = { org_id: newId(), dept: newId(), otherDept: newId() }) {
  const { org_id, dept, otherDept } = ids;
  const member = (role: string | null, over: Partial<CallerContext> = {}): CallerContext => ({
    org_id,
    user_id: newId(),
    role,
    department_id: null,
    scopes: ['read', 'write'],
    token_kind: 'api_key',
    token_id: newId(),
    request_id: newId(),
    ...over,
  });
  return {
    org_id,
    dept,
    otherDept,
    member,
    admin: member('admin'),
    researcher: member('researcher', { department_id: dept }),
    viewer: member('viewer', { department_id: dept }),
    apiKey: (scopes: string[]) => member(null, { user_id: null, scopes }),
  };
}

/**
 * A world whose organisation and departments are identity's, with a researcher
 * who is a member there: for bodies that name them (references are checked).
 */
async function realOrg() {
  const org_id = await owners.org();
  const w = org({ org_id, dept: await owners.department(org_id), otherDept: await owners.department(org_id) });
  return { ...w, researcher: w.member('researcher', { department_id: w.dept, user_id: await owners.member(org_id, 'researcher', w.dept) }) };
}

const create = async (resource: string, body: unknown, caller: CallerContext): Promise<Json> =>
  recordObject((await rec.call('createRecord', { resource, body: body as Json, parent_id: '' }, caller)).record!);
const get = async (resource: string, id: string, caller: CallerContext): Promise<Json> =>
  recordObject((await rec.call('getRecord', { resource, id, parent_id: '' }, caller)).record!);
const update = async (resource: string, id: string, body: unknown, caller: CallerContext, replace = false): Promise<Json> =>
  recordObject((await rec.call('updateRecord', { resource, id, body: body as Json, replace, parent_id: '' }, caller)).record!);
const remove = (resource: string, id: string, caller: CallerContext) => rec.call('deleteRecord', { resource, id, parent_id: '' }, caller);
async function list(resource: string, query: Record<string, string>, caller: CallerContext) {
  const res = await rec.call('listRecords', { resource, query, parent_id: '' }, caller);
  return { data: res.records.map(recordObject), total: res.total, limit: res.limit, offset: res.offset };
}
// as the gateway answers them
const sign = async (id: string, caller: CallerContext, meaning?: string): Promise<Json> =>
  JSON.parse(signedExperimentJson(await nb.call('signExperiment', { id, meaning, signer_name: 'Signer Name' }, caller)));
const amend = async (id: string, body: unknown, caller: CallerContext): Promise<Json> =>
  JSON.parse(experimentJson((await nb.call('amendExperiment', { id, body: body as Json }, caller)).experiment!));
const versions = async (id: string, caller: CallerContext): Promise<Json[]> =>
  (await nb.call('listExperimentVersions', { id }, caller)).experiments.map((e) => JSON.parse(experimentJson(e)) as Json);
const signaturesOf = async (id: string, caller: CallerContext): Promise<Json[]> =>
  (await nb.call('listExperimentSignatures', { id }, caller)).signatures.map(signatureObject);

async function failure(p: Promise<unknown>): Promise<DomainError> {
  try {
    await p;
  } catch (err) {
    return err as DomainError;
  }
  throw new Error('expected the call to fail');
}

const until = (cond: () => boolean, what: string) => waitFor(what, cond);

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?\+00:00$/;

describe.each([
  ['experiments', { title: 'PCR run', tags: ['pcr'], content: { blocks: [1] } }, { title: 'PCR run 2' }, { tags: ['x'] }],
  ['projects', { name: 'Enzymes', start_date: '2024-05-01', tags: [] }, { name: 'Enzymes II' }, { start_date: '2025-01-31' }],
  ['samples', { name: 'S-1', type: 'blood', metadata: { ph: 7.1 } }, { name: 'S-2' }, { metadata: { ph: 6.9 } }],
])('%s CRUD', (resource, body, patch, replacement) => {
  it('creates, reads, lists, updates and deletes', async () => {
    const w = org();
    const created = await create(resource, body, w.admin);
    expect(created).toMatchObject(body);
    expect(created.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(created.created_at).toMatch(ISO);
    expect(created.updated_at).toMatch(ISO);
    expect(created).not.toHaveProperty('org_id');
    expect(created.created_by).toBe(w.admin.user_id);

    expect(await get(resource, created.id, w.admin)).toEqual(created);
    const page = await list(resource, {}, w.admin);
    expect(page).toMatchObject({ total: 1, limit: 50, offset: 0 });
    expect(page.data).toEqual([created]);

    const updated = await update(resource, created.id, patch, w.admin);
    expect(updated).toEqual({ ...created, ...patch, updated_at: updated.updated_at });
    expect(Date.parse(updated.updated_at)).toBeGreaterThanOrEqual(Date.parse(created.updated_at));
    // PUT changes only the fields given, like PATCH
    const put = await update(resource, created.id, replacement, w.admin, true);
    expect(put).toEqual({ ...updated, ...replacement, updated_at: put.updated_at });

    await remove(resource, created.id, w.admin);
    expect((await failure(get(resource, created.id, w.admin))).kind).toBe('not_found');
    expect((await failure(remove(resource, created.id, w.admin))).kind).toBe('not_found');
  });
});

describe('defaults and server-set fields', () => {
  it('fills the defaults of each resource and sets authorship', async () => {
    const w = org();
    const exp = await create('experiments', {}, w.researcher);
    expect(exp).toMatchObject({
      status: 'draft',
      content: {},
      tags: [],
      author_id: w.researcher.user_id,
      department_id: w.dept,
      signed_at: null,
      signed_by: null,
      display_id: 'EXP-000001',
    });
    expect((await create('projects', { name: 'p' }, w.researcher)).status).toBe('active');
    const sample = await create('samples', { name: 's', storage_location_id: w.dept }, w.apiKey(['write']));
    expect(sample).toMatchObject({ status: 'registered', metadata: {}, storage_location_id: w.dept, created_by: null });
  });

  it('allocates display ids sequentially per organisation', async () => {
    const a = org();
    const b = org();
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push((await create('experiments', { title: `a${i}` }, a.admin)).display_id);
    expect(ids).toEqual(['EXP-000001', 'EXP-000002', 'EXP-000003']);
    expect((await create('experiments', {}, b.admin)).display_id).toBe('EXP-000001');
    const parallel = await Promise.all(Array.from({ length: 5 }, () => create('experiments', {}, b.admin)));
    expect(parallel.map((e) => e.display_id).sort()).toEqual(['EXP-000002', 'EXP-000003', 'EXP-000004', 'EXP-000005', 'EXP-000006']);
  });
});

describe('creates begun together (group commit, decision 034)', () => {
  const shared = async () => (await metrics().sharedTransactionWrites.get()).values.reduce((n, v) => n + v.value, 0);

  it('keeps each as it would be alone: a keyed duplicate in the same moment replays the first answer, every other create is made once', async () => {
    const w = org();
    const before = await shared();
    const keyed = { ...w.admin, idempotency_key: `key-${newId()}`, request_hash: 'same request' };
    const createSample = (name: string, caller: CallerContext) =>
      rec.call('createRecord', { resource: 'samples', body: { name }, parent_id: '' }, { ...caller, request_id: newId() });
    const [first, , duplicate] = await Promise.all([
      createSample('a', keyed),
      createSample('b', w.admin),
      createSample('a', keyed),
      createSample('c', w.admin),
    ]);
    expect(duplicate).toEqual(first);
    expect((await list('samples', {}, w.admin)).data.map((r) => r.name).sort()).toEqual(['a', 'b', 'c']);
    // they did share: one transaction that failed on the duplicate's claim, then each alone
    expect(await shared()).toBeGreaterThan(before);
  });
});

describe('organisation isolation', () => {
  it('never shows or changes a record of another organisation', async () => {
    const a = org();
    const b = org();
    for (const [resource, body] of [
      ['experiments', { title: 'secret' }],
      ['projects', { name: 'secret' }],
      ['samples', { name: 'secret' }],
    ] as const) {
      const mine = await create(resource, body, a.admin);
      await create(resource, body, b.admin);
      expect((await failure(get(resource, mine.id, b.admin))).kind).toBe('not_found');
      expect((await failure(update(resource, mine.id, { status: 'x' }, b.admin))).kind).toBe('not_found');
      expect((await failure(remove(resource, mine.id, b.admin))).kind).toBe('not_found');
      const theirs = await list(resource, {}, b.admin);
      expect(theirs.total).toBe(1);
      expect(theirs.data.map((r) => r.id)).not.toContain(mine.id);
      expect(await get(resource, mine.id, a.admin)).toMatchObject(body);
    }
  });

  it('rejects references to records of another organisation', async () => {
    const a = org();
    const b = org();
    const foreign = await create('projects', { name: 'theirs' }, b.admin);
    const err = await failure(create('experiments', { project_id: foreign.id }, a.admin));
    expect(err).toMatchObject({ kind: 'invalid', code: 'validation_failed', details: { field: 'project_id' } });
    expect((await failure(create('projects', { name: 'x', parent_project_id: foreign.id }, a.admin))).details).toMatchObject({
      field: 'parent_project_id',
    });
    const own = await create('projects', { name: 'mine' }, a.admin);
    const exp = await create('experiments', { project_id: own.id }, a.admin);
    expect(exp.project_id).toBe(own.id);
    expect((await failure(update('experiments', exp.id, { project_id: foreign.id }, a.admin))).details).toMatchObject({ field: 'project_id' });
    const child = await create('projects', { name: 'child', parent_project_id: own.id }, a.admin);
    expect((await failure(update('projects', own.id, { parent_project_id: child.id }, a.admin))).details).toMatchObject({
      field: 'parent_project_id',
    });
  });
});

// The reference check holds the project (FOR KEY SHARE) until the experiment is
// written: a delete of the project at the same moment makes the create wait and
// answer 400 on project_id, instead of passing the check and failing the foreign
// key (a 500). PGlite has one connection, so the delete cannot be held open there.
(process.env.DATABASE_URL ? it : it.skip)('answers 400 project_id when the project is deleted while an experiment is created', async () => {
  const w = org();
  const project = await create('projects', { name: 'going away' }, w.admin);
  const deleting = await holdTransaction(t.databaseUrl!, (db) => db.query('delete from notebook.projects where id = $1', [project.id]));
  try {
    const creating = failure(create('experiments', { project_id: project.id, title: 'late' }, w.admin));
    await deleting.waiters(1);
    await deleting.commit();
    expect(await creating).toMatchObject({ kind: 'invalid', code: 'validation_failed', details: { field: 'project_id' } });
  } finally {
    await deleting.close();
  }
});

describe('validation', () => {
  it('answers 400 with the field path and changes nothing', async () => {
    const w = org();
    expect(await failure(create('projects', { description: 'no name' }, w.admin))).toMatchObject({
      kind: 'invalid',
      code: 'validation_failed',
      details: { field: 'name' },
    });
    expect((await failure(create('samples', { name: 's', metadata: [1] }, w.admin))).details).toMatchObject({ field: 'metadata' });
    expect((await failure(create('experiments', { tags: ['a', 2] }, w.admin))).details).toMatchObject({ field: 'tags.1' });
    expect((await failure(create('samples', { name: 'nul \u0000 inside' }, w.admin))).details).toMatchObject({ field: 'name' });
    expect((await list('projects', {}, w.admin)).total).toBe(0);
  });

  it('rejects unknown and read-only fields, naming them', async () => {
    const w = org();
    const exp = await create('experiments', { title: 't' }, w.admin);
    const err = await failure(update('experiments', exp.id, { title: 'u', signed_at: new Date().toISOString(), colour: 'red' }, w.admin));
    expect(err).toMatchObject({ kind: 'invalid', code: 'validation_failed', details: { field: 'signed_at' } });
    expect((err.details!.fields as { path: string }[]).map((i) => i.path)).toEqual(['signed_at', 'colour']);
    for (const field of ['signed_by', 'display_id', 'author_id', 'id', 'org_id', 'created_at', 'updated_at']) {
      expect((await failure(update('experiments', exp.id, { [field]: null }, w.admin))).details).toMatchObject({ field });
    }
    expect((await failure(create('experiments', { signed_at: new Date().toISOString() }, w.admin))).details).toMatchObject({
      field: 'signed_at',
    });
    expect(await get('experiments', exp.id, w.admin)).toEqual(exp);
  });

  it('bounds list limits and rejects unknown query keys', async () => {
    const w = org();
    for (const limit of ['0', '501', 'ten']) {
      expect(await failure(list('samples', { limit }, w.admin))).toMatchObject({ code: 'validation_failed', details: { field: 'limit' } });
    }
    expect((await failure(list('samples', { offset: '-1' }, w.admin))).details).toMatchObject({ field: 'offset' });
    expect((await failure(list('samples', { colour: 'red' }, w.admin))).details).toMatchObject({ field: 'colour' });
    expect((await failure(list('samples', { order_by: 'org_id' }, w.admin))).details).toMatchObject({ field: 'order_by' });
    expect(await list('samples', { limit: '500' }, w.admin)).toMatchObject({ limit: 500, offset: 0, total: 0 });
    expect(await list('samples', { limit: '1' }, w.admin)).toMatchObject({ limit: 1 });
  });
});

describe('lists', () => {
  it('orders, filters and pages with the total of all matches', async () => {
    const w = await realOrg();
    const names = ['beta', 'alpha', 'delta', 'gamma'];
    const made: Json[] = [];
    for (const [i, name] of names.entries()) {
      made.push(await create('samples', { name, status: i % 2 ? 'stored' : 'registered', owner_id: i === 3 ? w.researcher.user_id : undefined }, w.admin));
    }
    const byName = await list('samples', { order_by: 'name', order: 'asc' }, w.admin);
    expect(byName.data.map((s) => s.name)).toEqual(['alpha', 'beta', 'delta', 'gamma']);
    const newestFirst = await list('samples', {}, w.admin);
    expect(newestFirst.data.map((s) => s.id)).toEqual([...made].reverse().map((s) => s.id));

    const stored = await list('samples', { status: 'stored', order_by: 'name', order: 'desc' }, w.admin);
    expect(stored.data.map((s) => s.name)).toEqual(['gamma', 'alpha']);
    expect(stored.total).toBe(2);
    expect((await list('samples', { owner_id: w.researcher.user_id! }, w.admin)).data.map((s) => s.name)).toEqual(['gamma']);

    const first = await list('samples', { order_by: 'name', order: 'asc', limit: '3' }, w.admin);
    expect(first).toMatchObject({ total: 4, limit: 3, offset: 0 });
    expect(first.data.map((s) => s.name)).toEqual(['alpha', 'beta', 'delta']);
    const second = await list('samples', { order_by: 'name', order: 'asc', limit: '3', offset: '3' }, w.admin);
    expect(second).toMatchObject({ total: 4, offset: 3 });
    expect(second.data.map((s) => s.name)).toEqual(['gamma']);
    expect(await list('samples', { offset: '10' }, w.admin)).toMatchObject({ data: [], total: 4 });

    const project = await create('projects', { name: 'p', start_date: '2024-05-01' }, w.admin);
    await create('projects', { name: 'q', start_date: '2024-06-01' }, w.admin);
    expect((await list('projects', { start_date: '2024-05-01' }, w.admin)).data.map((p) => p.id)).toEqual([project.id]);
    await create('experiments', { project_id: project.id, title: 'in p' }, w.admin);
    await create('experiments', { title: 'loose' }, w.admin);
    expect((await list('experiments', { project_id: project.id }, w.admin)).data.map((e) => e.title)).toEqual(['in p']);
  });

  // A page past an offset is chosen in a subquery and rendered after: the caller's
  // visibility and the filters must hold in it and in the count alike.
  it('pages past an offset with visibility and filters applied to the page and its total', async () => {
    const w = org();
    const other = w.member('researcher', { department_id: w.otherDept });
    const project = await create('projects', { name: 'shared' }, w.admin);
    const mine: string[] = [];
    for (let i = 0; i < 4; i++) mine.push((await create('experiments', { project_id: project.id, title: `mine ${i}` }, w.researcher)).id);
    await create('experiments', { title: 'mine, loose' }, w.researcher);
    for (let i = 0; i < 2; i++) await create('experiments', { project_id: project.id, title: `theirs ${i}` }, other);
    const q = { project_id: project.id, order_by: 'created_at', order: 'asc', limit: '2' };
    const second = await list('experiments', { ...q, offset: '2' }, w.researcher);
    expect(second).toMatchObject({ total: 4, offset: 2 });
    expect(second.data.map((e) => e.id)).toEqual(mine.slice(2));
    expect(await list('experiments', { ...q, offset: '4' }, w.researcher)).toMatchObject({ data: [], total: 4 });
    expect((await list('experiments', { ...q, offset: '2' }, w.admin)).total).toBe(6);
  });

  it('cuts a page of heavy records by bytes and reports the records it holds as its limit', async () => {
    // entries of almost 1 MB each: 50 of them would be 45 MB in one answer
    const w = org();
    const made = new Set<string>();
    for (let i = 0; i < 12; i++) made.add((await create('experiments', { title: `heavy ${i}`, content: { body: 'x'.repeat(900_000) } }, w.admin)).id);
    const first = await list('experiments', { limit: '50' }, w.admin);
    expect(first.data.length).toBeLessThan(12);
    expect(first).toMatchObject({ total: 12, offset: 0, limit: first.data.length });
    const second = await list('experiments', { limit: '50', offset: String(first.offset + first.limit) }, w.admin);
    expect(second).toMatchObject({ total: 12, limit: 50 });
    const seen = [...first.data, ...second.data].map((e) => e.id);
    expect(seen).toHaveLength(12);
    expect(new Set(seen)).toEqual(made);
  });
});

describe('permissions', () => {
  it('lets only administrators delete', async () => {
    const w = org();
    const s = await create('samples', { name: 's' }, w.researcher);
    for (const caller of [w.researcher, w.member('dept_admin'), w.member('qm'), w.apiKey(['read', 'write'])]) {
      expect(await failure(remove('samples', s.id, caller))).toMatchObject({ kind: 'forbidden', code: 'forbidden' });
    }
    expect(await get('samples', s.id, w.admin)).toMatchObject({ id: s.id });
    await remove('samples', s.id, w.apiKey(['admin']));
    const t = await create('samples', { name: 't' }, w.researcher);
    await remove('samples', t.id, w.apiKey(['*']));
    expect((await list('samples', {}, w.admin)).total).toBe(0);
  });

  it('never lets a viewer write', async () => {
    const w = org();
    const s = await create('samples', { name: 's' }, w.admin);
    expect((await failure(create('samples', { name: 'v' }, w.viewer))).kind).toBe('forbidden');
    expect((await failure(update('samples', s.id, { name: 'v' }, w.viewer))).kind).toBe('forbidden');
    expect((await get('samples', s.id, w.viewer)).name).toBe('s');
  });

  it('limits members to their department, records without one, and their own', async () => {
    const w = await realOrg();
    const other = await create('samples', { name: 'other dept', department_id: w.otherDept }, w.admin);
    const open = await create('samples', { name: 'no dept' }, w.admin);
    const mine = await create('samples', { name: 'my dept', department_id: w.dept }, w.admin);
    const owned = await create('samples', { name: 'owned', department_id: w.otherDept, owner_id: w.researcher.user_id }, w.admin);

    const seen = (await list('samples', { order_by: 'name', order: 'asc' }, w.researcher)).data.map((s) => s.name);
    expect(seen).toEqual(['my dept', 'no dept', 'owned']);
    expect((await list('samples', {}, w.researcher)).total).toBe(3);
    expect((await failure(get('samples', other.id, w.researcher))).kind).toBe('not_found');
    expect((await list('samples', {}, w.member('qm'))).total).toBe(4);
    expect((await list('samples', {}, w.apiKey(['read']))).total).toBe(4);

    // researcher: own records and those of the department, not merely visible ones
    expect((await update('samples', mine.id, { status: 'stored' }, w.researcher)).status).toBe('stored');
    expect((await update('samples', owned.id, { status: 'stored' }, w.researcher)).status).toBe('stored');
    expect((await failure(update('samples', open.id, { status: 'x' }, w.researcher))).kind).toBe('forbidden');
    expect((await failure(update('samples', other.id, { status: 'x' }, w.researcher))).kind).toBe('not_found');
    // dept_admin: own department and records without one
    const deptAdmin = w.member('dept_admin', { department_id: w.dept, user_id: await owners.member(w.org_id, 'dept_admin', w.dept) });
    const elsewhere = await create('samples', { name: 'elsewhere', department_id: w.otherDept, owner_id: deptAdmin.user_id }, w.admin);
    expect((await update('samples', open.id, { status: 'checked' }, deptAdmin)).status).toBe('checked');
    expect((await failure(update('samples', elsewhere.id, { status: 'x' }, deptAdmin))).kind).toBe('forbidden');
    expect((await failure(create('samples', { name: 'n', department_id: w.otherDept }, deptAdmin))).kind).toBe('forbidden');
  });
});

describe('signing', () => {
  const session = (w: ReturnType<typeof org>, role = 'researcher') => w.member(role, { token_kind: 'session', department_id: w.dept });

  it('signs once; a second signing is 409 already_signed', async () => {
    const w = org();
    const signer = session(w);
    const exp = await create('experiments', { title: 't' }, signer);
    const signed = await sign(exp.id, signer);
    expect(signed).toMatchObject({ id: exp.id, signed_by: signer.user_id });
    expect(signed.signed_at).toMatch(ISO);
    // the answer is the record as stored, with its signature manifest
    const { signatures, ...record } = signed;
    expect(await get('experiments', exp.id, w.admin)).toEqual(record);
    expect(signatures).toEqual([
      expect.objectContaining({
        meaning: 'authorship',
        signer_id: signer.user_id,
        content_hash: expect.stringMatching(/^[0-9a-f]{64}$/),
        content_matches: true,
      }),
    ]);
    expect(await failure(sign(exp.id, signer))).toMatchObject({ kind: 'conflict', code: 'already_signed' });
    // someone who is not its author may never sign it for authorship: 403 whatever its state
    expect(await failure(sign(exp.id, session(w, 'admin')))).toMatchObject({ kind: 'forbidden', code: 'forbidden' });
    expect((await get('experiments', exp.id, w.admin)).signed_by).toBe(signer.user_id);
  });

  it('lets exactly one of concurrent signings win', async () => {
    const w = org();
    const author = session(w, 'admin');
    const exp = await create('experiments', {}, author);
    // the author signing from four requests at once (a double click, a retry without a key)
    const signers = Array.from({ length: 4 }, () => ({ ...author, request_id: newId() }));
    const results = await Promise.allSettled(signers.map((s) => sign(exp.id, s)));
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    const rejected = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(rejected.map((r) => (r.reason as DomainError).code)).toEqual(['already_signed', 'already_signed', 'already_signed']);
  });

  it('needs a signed-in user who can see the experiment', async () => {
    const w = await realOrg();
    const b = org();
    const exp = await create('experiments', { department_id: w.otherDept }, w.admin);
    expect((await failure(sign(exp.id, w.admin))).kind).toBe('forbidden'); // an API key, not a session
    expect((await failure(sign(exp.id, session(w)))).kind).toBe('not_found');
    expect((await failure(sign(exp.id, session(b, 'admin')))).kind).toBe('not_found');
    expect((await failure(sign(newId(), session(w, 'admin')))).kind).toBe('not_found');
    expect((await get('experiments', exp.id, w.admin)).signed_at).toBeNull();
  });

  it('for authorship, takes the author of the version who may change it', async () => {
    // identity's organisation and departments: the draft is moved to another department
    const w = await realOrg();
    const author = session(w);
    // an amendment by a token without a user keeps the author of the version it amends
    const v1 = await create('experiments', { title: 't' }, author);
    await sign(v1.id, author);
    const v2 = await amend(v1.id, { reason: 'imported correction' }, w.apiKey(['write']));
    expect(v2).toMatchObject({ author_id: author.user_id, created_by: null });
    expect(await failure(sign(v2.id, session(w, 'admin')))).toMatchObject({ kind: 'forbidden', code: 'forbidden' });
    expect((await sign(v2.id, author)).signed_by).toBe(author.user_id);
    // an author who may no longer change the draft (a dept_admin whose department it left) may not sign it either
    const deptAdmin = w.member('dept_admin', { token_kind: 'session', department_id: w.dept });
    const draft = await create('experiments', { title: 'moved' }, deptAdmin);
    await update('experiments', draft.id, { department_id: w.otherDept }, w.admin);
    expect(await failure(sign(draft.id, deptAdmin))).toMatchObject({ kind: 'forbidden', message: 'no permission to change this experiment' });
    expect((await get('experiments', draft.id, w.admin)).signed_at).toBeNull();
  });

  it('keeps the answer of a keyed signing in its own transaction: a retry gets it, not 409, though the batched store is lost', async () => {
    const w = org();
    const signer = session(w);
    const exp = await create('experiments', { title: 't' }, signer);
    // the answers the gRPC server would store after the handler are dropped, as by a process killed right after the commit
    const batched = jest.spyOn(Receipts.prototype as unknown as { storeAnswers(items: unknown[]): Promise<void> }, 'storeAnswers').mockResolvedValue(undefined);
    try {
      const key = `key-${newId()}`;
      const first = await nb.call('signExperiment', { id: exp.id }, { ...signer, request_id: newId(), idempotency_key: key });
      const kept = await t.svc.deps.db.rows<{ answered: boolean }>(sql`select answer is not null as answered from notebook.call_receipts where key = ${key}`);
      expect(kept).toEqual([{ answered: true }]);
      expect(await nb.call('signExperiment', { id: exp.id }, { ...signer, request_id: newId(), idempotency_key: key })).toEqual(first);
      expect(first.experiment).toMatchObject({ id: exp.id, signed_by: signer.user_id });
      expect(batched).not.toHaveBeenCalled();
    } finally {
      batched.mockRestore();
    }
  });
});

describe('signed records', () => {
  const session = (w: ReturnType<typeof org>, role = 'researcher') => w.member(role, { token_kind: 'session', department_id: w.dept });

  /** An experiment of `author`, signed for authorship. */
  async function signedExperiment(w: ReturnType<typeof org>, author: CallerContext) {
    const exp = await create('experiments', { title: 'assay', content: { steps: ['mix', 'heat'] }, status: 'done' }, author);
    const signed = await sign(exp.id, author);
    const { signatures: _manifest, ...record } = signed;
    return record;
  }

  it('refuses to change or delete a signed experiment, and leaves it as signed', async () => {
    const w = org();
    const author = session(w);
    const record = await signedExperiment(w, author);
    for (const change of [update('experiments', record.id, { title: 'edited' }, author), update('experiments', record.id, { content: {} }, w.admin, true)]) {
      expect(await failure(change)).toMatchObject({ kind: 'conflict', code: 'experiment_signed' });
    }
    expect(await failure(remove('experiments', record.id, w.admin))).toMatchObject({ kind: 'conflict', code: 'experiment_signed' });
    expect(await get('experiments', record.id, w.admin)).toEqual(record);
  });

  it('amends a signed experiment with a reason into a new linked version, itself editable and signable', async () => {
    const w = org();
    const author = session(w);
    const record = await signedExperiment(w, author);
    expect(await failure(amend(record.id, { title: 'no reason' }, author))).toMatchObject({ kind: 'invalid', details: { field: 'reason' } });
    expect(await failure(amend(record.id, { reason: '   ' }, author))).toMatchObject({ kind: 'invalid', details: { field: 'reason' } });
    expect(await failure(amend(record.id, { reason: 'r', signed_at: 'now' }, author))).toMatchObject({ kind: 'invalid', details: { field: 'signed_at' } });

    const v2 = await amend(record.id, { reason: 'heating time was misrecorded', content: { steps: ['mix', 'heat 10 min'] } }, author);
    expect(v2).toMatchObject({
      display_id: record.display_id,
      version: 2,
      amends_id: record.id,
      amendment_reason: 'heating time was misrecorded',
      title: 'assay',
      status: 'done',
      content: { steps: ['mix', 'heat 10 min'] },
      signed_at: null,
      author_id: author.user_id,
    });
    expect(v2.id).not.toBe(record.id);
    expect(await get('experiments', record.id, w.admin)).toEqual(record);
    // a version is amended once; the latest one is the one to amend
    expect(await failure(amend(record.id, { reason: 'again' }, author))).toMatchObject({ code: 'already_amended', details: { amendment_id: v2.id } });
    expect(await failure(amend(v2.id, { reason: 'not signed yet' }, author))).toMatchObject({ kind: 'conflict', code: 'experiment_not_signed' });
    const edited = await update('experiments', v2.id, { title: 'assay, corrected' }, author);
    await sign(v2.id, author);
    expect(await failure(update('experiments', v2.id, { title: 'x' }, author))).toMatchObject({ code: 'experiment_signed' });

    const history = await versions(v2.id, w.admin);
    expect(history.map((v) => [v.id, v.version, v.amends_id])).toEqual([
      [record.id, 1, null],
      [v2.id, 2, record.id],
    ]);
    expect(history[1]).toMatchObject({ title: edited.title, signed_by: author.user_id });
    expect((await versions(record.id, w.admin)).map((v) => v.id)).toEqual([record.id, v2.id]);

    const amended = () => received.find((m) => m.type === 'audit.record' && (m.data as Json).record_id === v2.id && (m.data as Json).action === 'amend');
    await until(() => amended() !== undefined, 'the amendment audit record');
    expect(amended()!.data).toMatchObject({ resource: 'experiment', reason: 'heating time was misrecorded', before: record, after: v2, meaning: null });
  });

  it('lets only one of concurrent amendments of a version win', async () => {
    const w = org();
    const author = session(w);
    const record = await signedExperiment(w, author);
    const results = await Promise.allSettled([1, 2, 3].map((i) => amend(record.id, { reason: `change ${i}` }, author)));
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    expect(results.filter((r): r is PromiseRejectedResult => r.status === 'rejected').map((r) => (r.reason as DomainError).code)).toEqual([
      'already_amended',
      'already_amended',
    ]);
  });

  it('shows a signature no longer matching content changed behind the service', async () => {
    const w = org();
    const author = session(w);
    const record = await signedExperiment(w, author);
    const manifestOf = async () => signaturesOf(record.id, w.admin);
    expect((await manifestOf()).map((s) => s.content_matches)).toEqual([true]);
    await t.svc.deps.db.orm.execute(sql`update notebook.experiments set content = '{"steps": ["forged"]}' where id = ${record.id}::uuid`);
    expect((await manifestOf()).map((s) => s.content_matches)).toEqual([false]);
  });

  it('counts the authors of earlier versions as authors of an amendment: they cannot review it', async () => {
    const w = org();
    const first = session(w);
    const amender = session(w);
    const reviewer = session(w);
    const record = await signedExperiment(w, first);
    const v2 = await amend(record.id, { reason: 'typo in the title', title: 'assay 2' }, amender);
    await sign(v2.id, amender);
    expect(await failure(sign(v2.id, first, 'review'))).toMatchObject({ kind: 'forbidden', code: 'signer_is_author' });
    expect(await failure(sign(record.id, amender, 'review'))).toMatchObject({ kind: 'forbidden', code: 'signer_is_author' });
    expect((await sign(v2.id, reviewer, 'review')).signatures.map((s: Json) => s.meaning)).toEqual(['authorship', 'review']);
  });

  it('adds review and approval signatures by other people, each meaning once, never by an author', async () => {
    const w = org();
    const author = session(w);
    const reviewer = session(w);
    const approver = session(w, 'qm');
    const exp = await create('experiments', { title: 'to review' }, author);
    expect(await failure(sign(exp.id, reviewer, 'review'))).toMatchObject({ kind: 'conflict', code: 'authorship_required' });
    expect(await failure(sign(exp.id, author, 'witness'))).toMatchObject({ kind: 'invalid', details: { field: 'meaning' } });
    await sign(exp.id, author, 'authorship');
    expect(await failure(sign(exp.id, author, 'review'))).toMatchObject({ kind: 'forbidden', code: 'signer_is_author' });
    const reviewed = await sign(exp.id, reviewer, 'review');
    expect(await failure(sign(exp.id, approver, 'review'))).toMatchObject({ kind: 'conflict', code: 'already_signed' });
    expect(await failure(sign(exp.id, reviewer, 'approval'))).toMatchObject({ kind: 'forbidden', code: 'signer_already_signed' });
    const approved = await sign(exp.id, approver, 'approval');
    expect(approved.signatures.map((s: Json) => [s.meaning, s.signer_id, s.signer_name])).toEqual([
      ['authorship', author.user_id, 'Signer Name'],
      ['review', reviewer.user_id, 'Signer Name'],
      ['approval', approver.user_id, 'Signer Name'],
    ]);
    // every signature is bound to the same, unchanged content
    expect(new Set(approved.signatures.map((s: Json) => s.content_hash)).size).toBe(1);
    expect(approved.signatures.every((s: Json) => s.content_matches === true && s.hash_algorithm === 'sha256')).toBe(true);
    // review and approval leave signed_at / signed_by as the authorship signature set them
    expect(approved).toMatchObject({ signed_by: author.user_id, signed_at: reviewed.signed_at });
    const listed = await signaturesOf(exp.id, w.admin);
    expect(listed).toEqual(approved.signatures);
  });
});

describe('events and audit records', () => {
  const ofRecord = (id: string, type: string) => received.filter((m) => m.type === type && (m.data as Json).id === id);
  const auditOf = (id: string) => received.filter((m) => m.type === 'audit.record' && (m.data as Json).record_id === id);

  it('publishes the spec events with exactly their data fields, once per change', async () => {
    const w = org();
    const signer = w.member('admin', { token_kind: 'session' });
    const exp = await create('experiments', { title: 'e', status: 'draft' }, signer);
    await update('experiments', exp.id, { title: 'renamed' }, signer); // no status change, no event
    await update('experiments', exp.id, { status: 'in_progress' }, signer);
    await update('experiments', exp.id, { status: 'in_progress' }, signer);
    const signed = await sign(exp.id, signer);
    const sample = await create('samples', { name: 's', type: 'blood', storage_location_id: w.dept }, w.admin);
    const moved = await update('samples', sample.id, { status: 'stored' }, w.admin);
    await remove('samples', sample.id, w.admin);
    // the relay publishes in commit order: once this marker arrives, everything before it has
    const marker = await create('projects', { name: 'marker' }, w.admin);
    await until(() => auditOf(marker.id).length > 0, 'the marker audit record');

    const [created] = ofRecord(exp.id, 'experiment.created');
    expect(ofRecord(exp.id, 'experiment.created')).toHaveLength(1);
    expect(created).toMatchObject({ org_id: w.org_id, type: 'experiment.created' });
    expect(created!.data).toEqual({
      id: exp.id,
      display_id: exp.display_id,
      title: 'e',
      status: 'draft',
      project_id: null,
      author_id: signer.user_id,
      created_at: exp.created_at,
    });
    const changes = ofRecord(exp.id, 'experiment.status_changed');
    expect(changes).toHaveLength(1);
    expect(Object.keys(changes[0]!.data as Json).sort()).toEqual(['display_id', 'id', 'new_status', 'old_status', 'updated_at']);
    expect(changes[0]!.data).toMatchObject({ id: exp.id, display_id: exp.display_id, old_status: 'draft', new_status: 'in_progress' });
    expect(ofRecord(exp.id, 'experiment.signed').map((m) => m.data)).toEqual([
      { id: exp.id, display_id: exp.display_id, signed_by: signer.user_id, signed_at: signed.signed_at },
    ]);

    expect(ofRecord(sample.id, 'sample.created').map((m) => m.data)).toEqual([
      { id: sample.id, name: 's', type: 'blood', status: 'registered', storage_location_id: w.dept, created_at: sample.created_at },
    ]);
    expect(ofRecord(sample.id, 'sample.status_changed').map((m) => m.data)).toEqual([
      { id: sample.id, name: 's', old_status: 'registered', new_status: 'stored', updated_at: moved.updated_at },
    ]);
    expect(
      received
        .filter((m) => m.org_id === w.org_id && !m.type.startsWith('audit'))
        .map((m) => m.type)
        .sort(),
    ).toEqual(['experiment.created', 'experiment.signed', 'experiment.status_changed', 'sample.created', 'sample.status_changed']);

    const expAudit = auditOf(exp.id).map((m) => m.data as Json);
    expect(expAudit.map((a) => a.action)).toEqual(['create', 'update', 'update', 'update', 'sign']);
    expect(expAudit[0]).toMatchObject({ resource: 'experiment', before: null, after: exp, actor_user_id: signer.user_id, service: 'notebook' });
    expect(expAudit[1]).toMatchObject({ before: { title: 'e' }, after: { title: 'renamed' } });
    expect(expAudit[1]!.changed_fields).toEqual(expect.arrayContaining(['title', 'updated_at']));
    expect(expAudit[4]).toMatchObject({ before: { signed_at: null, signatures: [] }, after: signed, meaning: 'authorship', reason: null });
    expect(expAudit[4]!.changed_fields).toEqual(expect.arrayContaining(['signed_at', 'signed_by', 'signatures']));
    const sampleAudit = auditOf(sample.id).map((m) => m.data as Json);
    expect(sampleAudit.map((a) => a.action)).toEqual(['create', 'update', 'delete']);
    expect(sampleAudit[2]).toMatchObject({ before: moved, after: null });
    expect(auditOf(sample.id).every((m) => m.org_id === w.org_id)).toBe(true);
  });

  it('emits nothing for a rejected write', async () => {
    const w = org();
    const s = await create('samples', { name: 's' }, w.admin);
    await failure(update('samples', s.id, { status: 'x', signed_at: 'now' }, w.admin));
    await failure(update('samples', s.id, { status: 'x' }, w.viewer));
    await failure(remove('samples', s.id, w.researcher));
    const marker = await create('samples', { name: 'marker' }, w.admin);
    await until(() => auditOf(marker.id).length > 0, 'the marker audit record');
    expect(auditOf(s.id).map((m) => (m.data as Json).action)).toEqual(['create']);
    expect(ofRecord(s.id, 'sample.status_changed')).toHaveLength(0);
  });
});
