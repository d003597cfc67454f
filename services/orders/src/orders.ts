import { sql, type SQL } from 'drizzle-orm';
import { orderFromRow, type orders } from '@lab/contracts';
import { DomainError, isGuid, newId, parseWith, rows, structBody, type CallerContext, type Outbox, type Tx, type Database } from '@lab/kit';
import { createOrderBody, listOrdersQuery, type CreateOrderBody } from './bodies.js';
import { orderCreated } from './events.js';
import type { NotebookSamples } from './notebook-client.js';
import { assertMay } from '@lab/permissions';
import { orderJson } from './render.js';

export interface OrdersDeps {
  db: Database;
  outbox: Outbox;
  samples: NotebookSamples;
}

interface CreatedSample {
  id: string;
  position: number;
}

/**
 * Takes an order with its samples. The samples belong to the notebook service,
 * so this is a saga of three steps, not one distributed transaction:
 *
 * 1. the order row is stored as 'receiving' (its own transaction; the partial
 *    unique index on the number makes a concurrent duplicate lose here, 409);
 * 2. the samples are created one by one in the notebook over gRPC, as the
 *    caller (the notebook checks permissions, audits each sample and emits
 *    sample.created);
 * 3. one transaction links the created samples and sets the order 'received',
 *    with lab_order.created and the audit record; or, when a sample could not
 *    be created, sets it 'failed' with the error (linking the samples created
 *    before it, so none is unaccounted for), audits that, and the caller gets
 *    the notebook's error.
 *
 * A failed order keeps its row for the record but not its number: sending the
 * order again creates a new one. A crash between steps leaves the order in
 * 'receiving' (visible, never half-linked).
 */
export async function createOrder(deps: OrdersDeps, caller: CallerContext, given: Record<string, unknown> | undefined): Promise<orders.LabOrder> {
  // every member reads orders (the gateway checked the read scope); creating one is a write
  assertMay(caller, 'write', 'lab orders');
  const body = parseWith(createOrderBody, structBody(given));
  const id = newId();
  await deps.outbox.write(caller, (tx) => insertReceiving(tx, caller, id, body));

  const created: CreatedSample[] = [];
  let failure: { err: unknown; index: number } | undefined;
  for (const [position, s] of body.samples.entries()) {
    try {
      const sample = await deps.samples.create(caller, { name: s.name, type: s.type, metadata: s.metadata });
      created.push({ id: sample.id, position });
    } catch (err) {
      failure = { err, index: position };
      break;
    }
  }

  const error = failure ? describeFailure(failure.err, failure.index) : null;
  const order = await deps.outbox.write(caller, async (tx, emit) => {
    await linkSamples(tx, caller, id, body, created);
    const [row] = await rows<{ json: string }>(
      tx,
      sql`update orders.lab_orders o
          set status = ${error ? 'failed' : 'received'}, sample_count = ${created.length},
              error = ${error ? JSON.stringify(error) : null}::jsonb,
              received_at = ${error ? sql`null` : sql`now()`}, updated_at = now()
          where o.org_id = ${caller.org_id}::uuid and o.id = ${id}::uuid
          returning ${orderJson(true)}::text as json`,
    );
    const after = JSON.parse(row!.json) as Record<string, unknown>;
    if (!error) orderCreated(emit, caller, after);
    emit.audit(caller.org_id, { action: 'create', resource: 'lab_order', record_id: id, after });
    return orderFromRow(after);
  });
  if (failure) throw failureError(failure.err, id, failure.index);
  return order;
}

async function insertReceiving(tx: Tx, caller: CallerContext, id: string, body: CreateOrderBody): Promise<void> {
  const requester = body.requester ?? { name: body.requester_name!, email: null, organisation: null };
  const inserted = await rows<{ id: string }>(
    tx,
    sql`insert into orders.lab_orders
          (id, org_id, external_order_number, status, priority, requester_name, requester_email, requester_organisation, notes, created_by)
        values (${id}::uuid, ${caller.org_id}::uuid, ${body.external_order_number}, 'receiving', ${body.priority},
                ${requester.name}, ${requester.email ?? null}, ${requester.organisation ?? null}, ${body.notes ?? null},
                ${caller.user_id}::uuid)
        on conflict (org_id, external_order_number) where status <> 'failed' do nothing
        returning id`,
  );
  if (!inserted.length) {
    throw DomainError.conflict(`an order with external_order_number ${body.external_order_number} already exists`, 'duplicate_order', {
      external_order_number: body.external_order_number,
    });
  }
}

async function linkSamples(tx: Tx, caller: CallerContext, orderId: string, body: CreateOrderBody, created: CreatedSample[]): Promise<void> {
  if (!created.length) return;
  const values = created.map(({ id, position }) => {
    const s = body.samples[position]!;
    return sql`(${caller.org_id}::uuid, ${orderId}::uuid, ${id}::uuid, ${position}, ${s.name}, ${s.type ?? null}, ${s.external_sample_id ?? null})`;
  });
  await tx.execute(
    sql`insert into orders.order_samples (org_id, order_id, sample_id, position, name, type, external_sample_id)
        values ${sql.join(values, sql`, `)}`,
  );
}

function describeFailure(err: unknown, index: number): Record<string, unknown> {
  const e = err instanceof DomainError ? err : undefined;
  return { code: e?.code ?? 'internal_error', message: e?.message ?? 'sample creation failed', sample_index: index };
}

/** The notebook's error as the caller's answer, saying which order and sample it concerns. */
function failureError(err: unknown, orderId: string, index: number): DomainError {
  const where = { order_id: orderId, sample_index: index };
  if (err instanceof DomainError) return new DomainError(err.kind, err.code, err.message, { ...(err.details ?? {}), ...where });
  return new DomainError('internal', 'internal_error', 'sample creation failed', where);
}

/** GET /v1/lab-orders: newest first, without their samples (sample_count says how many). */
export async function listOrders(deps: OrdersDeps, caller: CallerContext, query: Record<string, string>) {
  const q = parseWith(listOrdersQuery, query);
  const conds: SQL[] = [sql`o.org_id = ${caller.org_id}::uuid`];
  if (q.status) conds.push(sql`o.status = ${q.status}`);
  if (q.priority) conds.push(sql`o.priority = ${q.priority}`);
  if (q.external_order_number) conds.push(sql`o.external_order_number = ${q.external_order_number}`);
  const where = sql.join(conds, sql` and `);
  const [page] = await deps.db.rows<{ json: string }>(
    sql`select coalesce(json_agg(p.j order by p.created_at desc, p.id desc), '[]'::json)::text as json
        from (select o.created_at, o.id, ${orderJson(false)} as j from orders.lab_orders o where ${where}
              order by o.created_at desc, o.id desc limit ${q.limit} offset ${q.offset}) p`,
  );
  const [count] = await deps.db.rows<{ total: number }>(sql`select count(*)::int as total from orders.lab_orders o where ${where}`);
  return { orders: (JSON.parse(page!.json) as Record<string, unknown>[]).map(orderFromRow), total: count!.total, limit: q.limit, offset: q.offset };
}

/** GET /v1/lab-orders/{id}: the order with its samples (ids and order-sample fields). */
export async function getOrder(deps: OrdersDeps, caller: CallerContext, id: string): Promise<orders.LabOrder> {
  if (!isGuid(id)) throw DomainError.notFound('lab order not found');
  const [row] = await deps.db.rows<{ json: string }>(
    sql`select ${orderJson(true)}::text as json from orders.lab_orders o where o.org_id = ${caller.org_id}::uuid and o.id = ${id}::uuid`,
  );
  if (!row) throw DomainError.notFound('lab order not found');
  return orderFromRow(JSON.parse(row.json) as Record<string, unknown>);
}
