/**
 * References in bodies: every field of a writable resource that names another
 * record is checked in the caller's organisation, on POST, PUT and PATCH. A
 * random id and a record of another organisation are each 400 validation_failed
 * naming the field, and nothing is written (the list's total and the record stay
 * as they were); a record of the caller's own organisation is taken.
 */
import { randomUUID } from 'node:crypto';
import { startStack, type Stack } from '@lab/testing';
import { call } from './http';

let stack: Stack;

const api = (method: string, path: string, token: string, body?: unknown) => call(stack.url, method, path, { token, body });

/** One organisation's admin key and the records its references may name. */
interface World {
  org: string;
  key: string;
  /** a sign-in token of the admin, who may sign */
  session: string;
  ids: Record<string, string>;
}
const PASSWORD = 'correct horse battery staple 3';
let A: World;
let B: World;

async function made(w: { key: string }, path: string, body: unknown): Promise<string> {
  const r = await api('POST', path, w.key, body);
  if (r.status !== 201) throw new Error(`POST ${path} answered ${r.status}: ${r.text}`);
  return r.body.data.id;
}

async function world(): Promise<World> {
  const { admin } = stack;
  // many writes in a minute: the limit is not what is tested here
  const org = (await admin.createOrg({ modules: ['lab_equipment'], rate_limit: { per_minute: 100_000, per_hour: 1_000_000 } })).id;
  const user = await admin.createUser({ password: PASSWORD });
  await admin.putMember(org, user.id, 'admin');
  const member = await admin.createUser();
  await admin.putMember(org, member.id, 'researcher');
  const login = await call(stack.url, 'POST', '/auth/v1/token', { body: { grant_type: 'password', email: user.email, password: PASSWORD } });
  const key = (await admin.createApiKey(org, { scopes: ['*'], user_id: user.id })).token;
  const w: World = { org, key, session: login.body.access_token, ids: {} };
  w.ids.department = (await admin.call<any>('POST', `/orgs/${org}/departments`, { name: `chemistry ${randomUUID()}` }, 201)).id;
  w.ids.member = member.id;
  w.ids.project = await made(w, '/v1/projects', { name: 'project' });
  w.ids.experiment = await made(w, '/v1/experiments', { title: 'entry' });
  w.ids.reagent = await made(w, '/v1/reagents', { name: 'Acetone' });
  w.ids.stockItem = await made(w, '/v1/stock-items', { catalog_id: w.ids.reagent, quantity: 1000, unit: 'mL' });
  w.ids.equipment = await made(w, '/v1/equipment', { name: 'balance' });
  return w;
}

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'notebook', 'audit', 'inventory', 'equipment'] });
  A = await world();
  B = await world();
}, 120_000);

afterAll(async () => {
  await stack?.stop();
});

/**
 * A reference field: where its records are written (`path`, under A's equipment
 * for sub-resources), a valid body around it, what it names (a key of
 * World.ids), and whether the resource has updates.
 */
interface Case {
  resource: string;
  field: string;
  target: string;
  path: (w: World) => string;
  body: () => Record<string, unknown>;
  updatable: boolean;
}

const top = (resource: string, field: string, target: string, body: () => Record<string, unknown> = () => ({}), updatable = true): Case => ({
  resource,
  field,
  target,
  path: () => `/v1/${resource}`,
  body,
  updatable,
});
const sub = (resource: string, field: string, target: string, body: () => Record<string, unknown>): Case => ({
  resource: `equipment/${resource}`,
  field,
  target,
  path: (w) => `/v1/equipment/${w.ids.equipment}/${resource}`,
  body,
  updatable: true,
});

// a completed session each time: only one session of an equipment may be open
const session = () => ({ started_at: '2024-01-01T08:00:00Z', ended_at: '2024-01-01T09:00:00Z' });

const CASES: Case[] = [
  top('experiments', 'project_id', 'project'),
  top('experiments', 'department_id', 'department'),
  top('projects', 'parent_project_id', 'project', () => ({ name: 'p' })),
  top('projects', 'department_id', 'department', () => ({ name: 'p' })),
  top('projects', 'lead_researcher_id', 'member', () => ({ name: 'p' })),
  top('samples', 'department_id', 'department', () => ({ name: 's' })),
  top('samples', 'owner_id', 'member', () => ({ name: 's' })),
  top('equipment', 'department_id', 'department', () => ({ name: 'e' })),
  sub('usage', 'project_id', 'project', session),
  sub('usage', 'entry_id', 'experiment', session),
  sub('maintenance', 'performed_by', 'member', () => ({ maintenance_type: 'inspection' })),
  top('reagents', 'department_id', 'department', () => ({ name: 'r' })),
  top('stock-items', 'catalog_id', 'reagent', () => ({ catalog_id: A.ids.reagent, quantity: 1, unit: 'mL' })),
  top('stock-items', 'department_id', 'department', () => ({ catalog_id: A.ids.reagent, quantity: 1, unit: 'mL' })),
  // movements have no update: the movement log is append-only
  top('stock-movements', 'stock_item_id', 'stockItem', () => ({ movement_type: 'consume', quantity_delta: -1 }), false),
  top('stock-movements', 'entry_id', 'experiment', () => ({ stock_item_id: A.ids.stockItem, movement_type: 'consume', quantity_delta: -1 }), false),
];

const total = async (path: string): Promise<number> => {
  const r = await api('GET', `${path}?limit=1`, A.key);
  expect(r.status).toBe(200);
  return r.body.pagination.total;
};

function expectRefused(r: { status: number; body: any; text: string }, field: string) {
  expect({ status: r.status, code: r.body?.error?.code, field: r.body?.error?.details?.field }).toEqual({ status: 400, code: 'validation_failed', field });
  expect(r.body.error.details.fields).toEqual([{ path: field, message: expect.stringMatching(new RegExp(`^${field} names no .+ of this organisation$`)) }]);
}

/** a random id, and a record of the other organisation */
const strangers = (c: Case) => [
  ['a random id', randomUUID()],
  ["another organisation's record", B.ids[c.target]!],
];

describe.each(CASES.map((c) => [`${c.resource} ${c.field}`, c] as const))('%s', (_name, c) => {
  it("POST: refuses a random id and another organisation's record (400 naming the field, nothing written); takes its own", async () => {
    const path = c.path(A);
    const before = await total(path);
    for (const [, id] of strangers(c)) expectRefused(await api('POST', path, A.key, { ...c.body(), [c.field]: id }), c.field);
    expect(await total(path)).toBe(before);
    const own = await api('POST', path, A.key, { ...c.body(), [c.field]: A.ids[c.target] });
    expect(own.status).toBe(201);
    expect(own.body.data[c.field]).toBe(A.ids[c.target]);
  });

  // movements are never updated: the service refuses it before reading the body
  if (!c.updatable) return;
  it('PUT and PATCH: refuse the same, the record unchanged; take its own', async () => {
    const path = c.path(A);
    const id = await made(A, path, c.body());
    const stored = (await api('GET', `${path}/${id}`, A.key)).body.data;
    for (const method of ['PUT', 'PATCH']) {
      for (const [, ref] of strangers(c)) expectRefused(await api(method, `${path}/${id}`, A.key, { [c.field]: ref }), c.field);
    }
    expect((await api('GET', `${path}/${id}`, A.key)).body.data).toEqual(stored);
    for (const method of ['PUT', 'PATCH']) {
      const own = await api(method, `${path}/${id}`, A.key, { [c.field]: A.ids[c.target] });
      expect(own.status).toBe(200);
      expect(own.body.data[c.field]).toBe(A.ids[c.target]);
    }
  });
});

describe('inventories closed_by', () => {
  it('refuses a closer who is not a member of the organisation; takes a member', async () => {
    const run = await made(A, '/v1/inventories', { name: 'count' });
    for (const method of ['PUT', 'PATCH']) {
      for (const ref of [randomUUID(), B.ids.member]) {
        expectRefused(await api(method, `/v1/inventories/${run}`, A.key, { status: 'closed', closed_by: ref }), 'closed_by');
      }
    }
    expect((await api('GET', `/v1/inventories/${run}`, A.key)).body.data).toMatchObject({ status: 'open', closed_by: null });
    const closed = await api('PATCH', `/v1/inventories/${run}`, A.key, { status: 'closed', closed_by: A.ids.member });
    expect(closed.status).toBe(200);
    expect(closed.body.data).toMatchObject({ status: 'closed', closed_by: A.ids.member });
  });
});

describe('experiment amendments', () => {
  it('check the references they change like any write', async () => {
    const exp = await made(A, '/v1/experiments', { title: 'to sign' });
    const signed = await call(stack.url, 'POST', `/app/v1/experiments/${exp}/sign`, {
      token: A.session,
      body: { password: PASSWORD },
      headers: { 'x-org-id': A.org },
    });
    expect(signed.status).toBe(200);
    const versions = async () => (await api('GET', `/v1/experiments/${exp}/versions`, A.key)).body.data.length;
    const n = await versions();
    for (const field of ['project_id', 'department_id']) {
      for (const ref of [randomUUID(), B.ids[field === 'project_id' ? 'project' : 'department']!]) {
        expectRefused(await api('POST', `/v1/experiments/${exp}/amendments`, A.key, { reason: 'fix', [field]: ref }), field);
      }
    }
    expect(await versions()).toBe(n);
    const own = await api('POST', `/v1/experiments/${exp}/amendments`, A.key, { reason: 'fix', project_id: A.ids.project, department_id: A.ids.department });
    expect(own.status).toBe(201);
    expect(own.body.data).toMatchObject({ project_id: A.ids.project, department_id: A.ids.department, version: 2 });
  });
});

describe('a body without references', () => {
  it('is written as before, and a null clears a reference', async () => {
    const s = await made(A, '/v1/samples', { name: 'plain', owner_id: A.ids.member });
    const cleared = await api('PATCH', `/v1/samples/${s}`, A.key, { owner_id: null });
    expect(cleared.status).toBe(200);
    expect(cleared.body.data.owner_id).toBeNull();
  });
});
