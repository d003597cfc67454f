import { recordObject, records, recordsWire } from '@lab/contracts';
import { RpcClient, newId, type BusMessage, type CallerContext, type DomainError } from '@lab/kit';
import { definition } from '@lab/inventory';
import { startReferenceOwners, startTestService, waitFor, type ReferenceOwners, type TestService } from '@lab/testing';

let t: TestService;
let rec: RpcClient<typeof records.RecordServiceService>;
let received: BusMessage[];
/** identity and notebook, where the departments, members and entries that references name live */
let owners: ReferenceOwners;

beforeAll(async () => {
  owners = await startReferenceOwners(['identity', 'notebook']);
  t = await startTestService(definition, { bindings: ['stock_movement.#', 'stock_item.#', 'audit.record'], peers: owners.peers });
  received = t.events.received;
  rec = new RpcClient(recordsWire.Client, t.svc.address, { secret: t.secret });
});

afterAll(async () => {
  rec?.close();
  await owners?.stop();
  await t?.stop();
});

type Json = Record<string, any>;

function org(ids = { org_id: newId(), dept: newId() }) {
  const { org_id, dept } = ids;
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
    member,
    admin: member('admin'),
    researcher: member('researcher', { department_id: dept }),
    viewer: member('viewer', { department_id: dept }),
  };
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
  return { data: res.records.map(recordObject), total: res.total };
}

async function failure(p: Promise<unknown>): Promise<DomainError> {
  try {
    await p;
  } catch (err) {
    return err as DomainError;
  }
  throw new Error('expected the call to fail');
}

const until = (cond: () => boolean, what: string) => waitFor(what, cond);

const auditOf = (id: string) => received.filter((m) => m.type === 'audit.record' && (m.data as Json).record_id === id);
/** Waits until the relay published a marker record's audit entry: everything committed before it is out too. */
async function flush(w: ReturnType<typeof org>) {
  const marker = await create('inventories', { name: 'marker' }, w.admin);
  await until(() => auditOf(marker.id).length > 0, 'the marker audit record');
}

/** A world whose organisation and department are identity's: for bodies that name them (references are checked). */
async function realOrg() {
  const org_id = await owners.org();
  return org({ org_id, dept: await owners.department(org_id) });
}

/** An experiment entry of the notebook in the world's organisation, for a movement's entry_id. */
const entryOf = (w: ReturnType<typeof org>) => owners.notebookRecord('experiments', { title: 'assay' }, w.admin);

async function stockOf(w: ReturnType<typeof org>, quantity: number, extra: Json = {}) {
  const reagent = await create('reagents', { name: 'Ethanol' }, w.admin);
  return create('stock-items', { catalog_id: reagent.id, quantity, unit: 'mL', ...extra }, w.admin);
}

const fullReagent = {
  name: 'Sodium chloride',
  alias: 'NaCl',
  cas_number: '7647-14-5',
  formula: 'NaCl',
  purity: '>= 99.5 %',
  aggregate_state: 'solid',
  storage_temperature: 'RT',
  storage_class: '13',
  un_number: 'none',
  description: 'table salt',
  notes: 'dry',
  molecular_weight: 58.44,
  density: 2.165,
  flash_point: -12.5,
  signal_word: 'none',
  h_phrases: ['H319'],
  p_phrases: ['P264', 'P280'],
  hazard_pictograms: ['GHS07'],
  external_link: 'https://pubchem.ncbi.nlm.nih.gov/compound/5234',
};

describe('reagents', () => {
  it('creates with every field, keeps numbers numbers, updates, lists and deletes', async () => {
    const w = await realOrg();
    const r = await create('reagents', { ...fullReagent, department_id: w.dept }, w.admin);
    expect(r).toMatchObject({ ...fullReagent, department_id: w.dept });
    expect(typeof r.molecular_weight).toBe('number');
    expect(r).not.toHaveProperty('org_id');
    expect(await get('reagents', r.id, w.admin)).toEqual(r);
    const patched = await update('reagents', r.id, { signal_word: 'warning', density: 2.17 }, w.admin);
    expect(patched).toMatchObject({ signal_word: 'warning', density: 2.17, name: 'Sodium chloride' });
    expect((await list('reagents', { cas_number: '7647-14-5' }, w.admin)).data.map((x) => x.id)).toEqual([r.id]);
    await remove('reagents', r.id, w.admin);
    expect((await failure(get('reagents', r.id, w.admin))).kind).toBe('not_found');
  });

  it('answers 400 naming the field for bad values and changes nothing', async () => {
    const w = org();
    for (const [field, value] of [
      ['signal_word', 'caution'],
      ['external_link', 'javascript:alert(1)'],
      ['external_link', 'ftp://example.org/file'],
      ['molecular_weight', '58.44'],
      ['department_id', 'dept-1'],
      ['hazard_pictograms', 'GHS07'],
    ] as const) {
      expect(await failure(create('reagents', { name: 'x', [field]: value }, w.admin))).toMatchObject({
        kind: 'invalid',
        code: 'validation_failed',
        details: { field },
      });
    }
    expect((await failure(create('reagents', { cas_number: '64-17-5' }, w.admin))).details).toMatchObject({ field: 'name' });
    expect((await list('reagents', {}, w.admin)).total).toBe(0);
  });

  it('refuses to delete a catalog entry that still has stock', async () => {
    const w = org();
    const item = await stockOf(w, 5);
    expect(await failure(remove('reagents', item.catalog_id, w.admin))).toMatchObject({ kind: 'conflict', code: 'reagent_in_use' });
    await remove('stock-items', item.id, w.admin);
    await remove('reagents', item.catalog_id, w.admin);
  });
});

describe('stock items', () => {
  const full = {
    quantity: 2.5,
    unit: 'L',
    name_suffix: '2.5 L bottle',
    manufacturer: 'Merck',
    supplier: 'VWR',
    article_number: '1.00983',
    order_number: 'PO-1',
    lot_number: 'K123',
    lot_status: 'released',
    container_material: 'glass',
    cost_center: 'CC-7',
    project_number: 'P-9',
    intended_use: 'HPLC',
    notes: 'n',
    package_size_full: 2.5,
    package_size_current: 2.5,
    purchase_price: 49.9,
    min_stock: 0.5,
    storage_location_id: newId(),
    acquired_on: '2024-01-15',
    opened_on: '2024-02-01',
    expires_on: '2026-01-31',
    inspected_on: '2024-06-30',
  };

  it('creates with every field, updates everything but the quantity, lists by catalog entry', async () => {
    const w = await realOrg();
    const reagent = await create('reagents', { name: 'Ethanol' }, w.admin);
    const item = await create('stock-items', { catalog_id: reagent.id, ...full, department_id: w.dept }, w.admin);
    expect(item).toMatchObject({ catalog_id: reagent.id, ...full, department_id: w.dept });
    expect(typeof item.quantity).toBe('number');
    expect(typeof item.purchase_price).toBe('number');
    const patched = await update('stock-items', item.id, { lot_status: 'blocked', expires_on: '2027-01-01', min_stock: 1 }, w.admin);
    expect(patched).toMatchObject({ lot_status: 'blocked', expires_on: '2027-01-01', min_stock: 1, quantity: 2.5 });
    const err = await failure(update('stock-items', item.id, { quantity: 10 }, w.admin, true));
    expect(err).toMatchObject({ kind: 'invalid', code: 'validation_failed', details: { field: 'quantity' } });
    expect((await get('stock-items', item.id, w.admin)).quantity).toBe(2.5);
    expect((await list('stock-items', { catalog_id: reagent.id }, w.admin)).data.map((x) => x.id)).toEqual([item.id]);
  });

  it('needs a catalog entry of the same organisation and valid dates and numbers', async () => {
    const w = org();
    const b = org();
    const foreign = await create('reagents', { name: 'theirs' }, b.admin);
    expect(await failure(create('stock-items', { catalog_id: foreign.id, quantity: 1, unit: 'g' }, w.admin))).toMatchObject({
      kind: 'invalid',
      code: 'validation_failed',
      details: { field: 'catalog_id' },
    });
    expect((await failure(create('stock-items', { catalog_id: newId(), quantity: 1, unit: 'g' }, w.admin))).details).toMatchObject({
      field: 'catalog_id',
    });
    const own = await create('reagents', { name: 'mine' }, w.admin);
    for (const [field, value] of [
      ['expires_on', '2025-02-30'],
      ['acquired_on', '15.01.2024'],
      ['quantity', '1'],
      ['quantity', -1],
      ['min_stock', 'low'],
    ] as const) {
      expect((await failure(create('stock-items', { catalog_id: own.id, quantity: 1, unit: 'g', [field]: value }, w.admin))).details).toMatchObject({
        field,
      });
    }
    const item = await create('stock-items', { catalog_id: own.id, quantity: 1, unit: 'g' }, w.admin);
    expect((await failure(update('stock-items', item.id, { catalog_id: foreign.id }, w.admin))).details).toMatchObject({ field: 'catalog_id' });
    expect((await list('stock-items', {}, w.admin)).total).toBe(1);
  });

  it('are read by every member and written by the permission model, with stock without a department shared by every writer', async () => {
    const w = await realOrg();
    const other = await owners.department(w.org_id);
    const shared = await stockOf(w, 1);
    const ours = await stockOf(w, 1, { department_id: w.dept });
    const theirs = await stockOf(w, 1, { department_id: other });
    const deptAdmin = w.member('dept_admin', { department_id: w.dept });
    for (const caller of [w.researcher, w.viewer, deptAdmin]) expect((await list('stock-items', {}, caller)).total).toBe(3);
    for (const caller of [w.researcher, deptAdmin]) {
      expect((await update('stock-items', shared.id, { notes: 'checked' }, caller)).notes).toBe('checked');
      expect((await update('stock-items', ours.id, { notes: 'checked' }, caller)).notes).toBe('checked');
      expect(await failure(update('stock-items', theirs.id, { notes: 'x' }, caller))).toMatchObject({
        code: 'forbidden',
        message: 'no permission to change this stock_item',
      });
    }
    expect(await failure(update('stock-items', shared.id, { notes: 'x' }, w.viewer))).toMatchObject({
      code: 'forbidden',
      message: 'the viewer role cannot change records',
    });
    // a researcher owns what it files elsewhere; a dept_admin's reach is its department and stock without one
    const reagent = await create('reagents', { name: 'Acetone' }, w.admin);
    expect(await create('stock-items', { catalog_id: reagent.id, quantity: 1, unit: 'g', department_id: other }, w.researcher)).toMatchObject({
      department_id: other,
    });
    expect(await failure(create('stock-items', { catalog_id: reagent.id, quantity: 1, unit: 'g', department_id: other }, deptAdmin))).toMatchObject({
      code: 'forbidden',
    });
  });
});

describe('stock movements', () => {
  it('applies consumptions concurrently without losing one', async () => {
    const w = org();
    const item = await stockOf(w, 100);
    const results = await Promise.all(
      Array.from({ length: 50 }, () => create('stock-movements', { stock_item_id: item.id, movement_type: 'consume', quantity_delta: -1 }, w.admin)),
    );
    expect((await get('stock-items', item.id, w.admin)).quantity).toBe(50);
    expect(results.map((m) => m.quantity_after).sort((a, b) => a - b)).toEqual(Array.from({ length: 50 }, (_, i) => 50 + i));
    expect((await list('stock-movements', { stock_item_id: item.id, limit: '500' }, w.admin)).total).toBe(50);
  });

  it('records quantity_after and unit, and refuses to go below zero with 409 insufficient_stock', async () => {
    const w = org();
    const item = await stockOf(w, 3);
    const entry = await entryOf(w);
    const m = await create('stock-movements', { stock_item_id: item.id, movement_type: 'consume', quantity_delta: -1.25, entry_id: entry }, w.admin);
    expect(m).toMatchObject({ stock_item_id: item.id, quantity_delta: -1.25, quantity_after: 1.75, unit: 'mL', entry_id: entry });
    for (const [movement_type, quantity_delta] of [
      ['consume', -2],
      ['dispose', -1.76],
      ['adjustment', -5],
    ] as const) {
      expect(await failure(create('stock-movements', { stock_item_id: item.id, movement_type, quantity_delta }, w.admin))).toMatchObject({
        kind: 'conflict',
        code: 'insufficient_stock',
        details: { available: 1.75, requested: -quantity_delta },
      });
    }
    expect((await get('stock-items', item.id, w.admin)).quantity).toBe(1.75);
    expect((await list('stock-movements', { stock_item_id: item.id }, w.admin)).total).toBe(1);
    // exactly all of it is fine
    expect((await create('stock-movements', { stock_item_id: item.id, movement_type: 'dispose', quantity_delta: -1.75 }, w.admin)).quantity_after).toBe(0);
  });

  it('validates the body and the stock item reference', async () => {
    const w = org();
    const b = org();
    const item = await stockOf(w, 10);
    const theirs = await stockOf(b, 10);
    const base = { stock_item_id: item.id, movement_type: 'consume', quantity_delta: -1 };
    for (const [body, field] of [
      [{ ...base, quantity_delta: 1 }, 'quantity_delta'],
      [{ ...base, movement_type: 'restock' }, 'quantity_delta'],
      [{ ...base, quantity_delta: 0, movement_type: 'adjustment' }, 'quantity_delta'],
      [{ ...base, movement_type: 'borrow' }, 'movement_type'],
      [{ ...base, entry_id: 'EXP-1' }, 'entry_id'],
      [{ ...base, stock_item_id: theirs.id }, 'stock_item_id'],
      [{ ...base, quantity_after: 3 }, 'quantity_after'],
    ] as const) {
      expect(await failure(create('stock-movements', body, w.admin))).toMatchObject({ code: 'validation_failed', details: { field } });
    }
    expect((await get('stock-items', item.id, w.admin)).quantity).toBe(10);
    expect((await get('stock-items', theirs.id, b.admin)).quantity).toBe(10);
    expect((await failure(create('stock-movements', base, w.viewer))).kind).toBe('forbidden');
  });

  it('cannot be updated', async () => {
    const w = org();
    const item = await stockOf(w, 10);
    const m = await create('stock-movements', { stock_item_id: item.id, movement_type: 'consume', quantity_delta: -1 }, w.admin);
    for (const replace of [false, true]) {
      expect(await failure(update('stock-movements', m.id, { reason: 'x' }, w.admin, replace))).toMatchObject({
        kind: 'method_not_allowed',
        code: 'method_not_allowed',
      });
    }
    expect(await get('stock-movements', m.id, w.admin)).toEqual(m);
  });

  it('reverses its delta when deleted, unless the stock is no longer there', async () => {
    const w = org();
    const item = await stockOf(w, 10);
    const used = await create('stock-movements', { stock_item_id: item.id, movement_type: 'consume', quantity_delta: -4 }, w.admin);
    expect((await failure(remove('stock-movements', used.id, w.researcher))).kind).toBe('forbidden');
    await remove('stock-movements', used.id, w.admin);
    expect((await get('stock-items', item.id, w.admin)).quantity).toBe(10);
    expect((await failure(get('stock-movements', used.id, w.admin))).kind).toBe('not_found');

    const restock = await create('stock-movements', { stock_item_id: item.id, movement_type: 'restock', quantity_delta: 5 }, w.admin);
    await create('stock-movements', { stock_item_id: item.id, movement_type: 'consume', quantity_delta: -12 }, w.admin);
    expect(await failure(remove('stock-movements', restock.id, w.admin))).toMatchObject({
      kind: 'conflict',
      code: 'insufficient_stock',
      details: { available: 3, requested: 5 },
    });
    expect((await get('stock-items', item.id, w.admin)).quantity).toBe(3);
    expect(await get('stock-movements', restock.id, w.admin)).toEqual(restock);
  });

  it('publishes stock_movement.created with every field and below_min_stock once, when crossing', async () => {
    const w = org();
    const item = await stockOf(w, 10, { min_stock: 5 });
    const entry = await entryOf(w);
    const first = await create(
      'stock-movements',
      { stock_item_id: item.id, movement_type: 'consume', quantity_delta: -5, reason: 'assay', intended_use: 'PCR', entry_id: entry },
      w.researcher,
    );
    const second = await create('stock-movements', { stock_item_id: item.id, movement_type: 'consume', quantity_delta: -1 }, w.admin); // 5 -> 4 crosses
    await create('stock-movements', { stock_item_id: item.id, movement_type: 'consume', quantity_delta: -1 }, w.admin); // stays below
    await flush(w);

    const created = received.filter((m) => m.type === 'stock_movement.created' && (m.data as Json).stock_item_id === item.id);
    expect(created).toHaveLength(3);
    expect(created[0]).toMatchObject({ org_id: w.org_id });
    expect(created[0]!.data).toEqual({
      id: first.id,
      stock_item_id: item.id,
      movement_type: 'consume',
      quantity_delta: -5,
      quantity_after: 5,
      unit: 'mL',
      reason: 'assay',
      intended_use: 'PCR',
      entry_id: entry,
      created_at: first.created_at,
      created_by: w.researcher.user_id,
    });
    const below = received.filter((m) => m.type === 'stock_item.below_min_stock' && (m.data as Json).stock_item_id === item.id);
    expect(below.map((m) => m.data)).toEqual([
      { stock_item_id: item.id, catalog_id: item.catalog_id, quantity: 4, min_stock: 5, unit: 'mL', movement_id: second.id },
    ]);
    expect(below[0]!.org_id).toBe(w.org_id);
    expect(auditOf(first.id).map((m) => (m.data as Json).action)).toEqual(['create']);
  });
});

describe('inventory runs', () => {
  it('goes open -> closed -> archived and never back', async () => {
    const w = org();
    const run = await create('inventories', { name: 'Q1 count', notes: 'room 2', scope_room_id: w.dept }, w.researcher);
    expect(run).toMatchObject({ name: 'Q1 count', status: 'open', scope_room_id: w.dept, closed_at: null, closed_by: null });
    const renamed = await update('inventories', run.id, { name: 'Q1 count (lab 2)' }, w.researcher);
    expect(renamed.status).toBe('open');
    expect((await failure(update('inventories', run.id, { closed_at: new Date().toISOString() }, w.researcher))).details).toMatchObject({
      field: 'closed_at',
    });
    expect(await failure(update('inventories', run.id, { status: 'archived' }, w.researcher))).toMatchObject({
      kind: 'conflict',
      code: 'invalid_transition',
    });

    const closed = await update('inventories', run.id, { status: 'closed' }, w.researcher);
    expect(closed).toMatchObject({ status: 'closed', closed_by: w.researcher.user_id });
    expect(closed.closed_at).toBe(closed.updated_at);
    expect(await failure(update('inventories', run.id, { status: 'open' }, w.admin))).toMatchObject({
      kind: 'conflict',
      code: 'invalid_transition',
      details: { from: 'closed', to: 'open' },
    });
    const archived = await update('inventories', run.id, { status: 'archived' }, w.admin);
    expect(archived).toMatchObject({ status: 'archived', closed_at: closed.closed_at, closed_by: w.researcher.user_id });
    for (const status of ['closed', 'open']) {
      expect(await failure(update('inventories', run.id, { status }, w.admin))).toMatchObject({ code: 'invalid_transition' });
    }
    expect((await get('inventories', run.id, w.admin)).status).toBe('archived');
    expect((await failure(update('inventories', run.id, { scope_room_id: w.dept }, w.admin))).details).toMatchObject({ field: 'scope_room_id' });
    // a run recorded after the fact is created closed (or archived), closed now by its creator
    const late = await create('inventories', { name: 'counted last week', status: 'closed' }, w.researcher);
    expect(late).toMatchObject({ status: 'closed', closed_by: w.researcher.user_id });
    expect(late.closed_at).toEqual(late.created_at);
    expect(await create('inventories', { name: 'old', status: 'archived' }, w.admin)).toMatchObject({ status: 'archived', closed_by: w.admin.user_id });
    expect((await failure(create('inventories', { name: 'x', status: 'done' }, w.admin))).details).toMatchObject({ field: 'status' });
  });

  it('takes closed_at and closed_by from the closing request when given', async () => {
    const w = await realOrg();
    const run = await create('inventories', { name: 'recorded later' }, w.admin);
    const counter = await owners.member(w.org_id, 'researcher');
    const closed = await update('inventories', run.id, { status: 'closed', closed_at: '2024-03-01T17:00:00Z', closed_by: counter }, w.admin);
    expect(closed).toMatchObject({ status: 'closed', closed_by: counter });
    expect(Date.parse(closed.closed_at)).toBe(Date.parse('2024-03-01T17:00:00Z'));
    expect((await failure(update('inventories', run.id, { notes: 'x', closed_by: w.admin.user_id }, w.admin))).details).toMatchObject({
      field: 'closed_by',
    });
  });
});
