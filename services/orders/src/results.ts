import { sql, type SQL } from 'drizzle-orm';
import { resultsFromJson, type orders } from '@lab/contracts';
import { DomainError, isGuid, newId, parseWith, rows, structBody, validationFailed, type CallerContext, type Tx } from '@lab/kit';
import { listResultsQuery, recordResultBody } from './bodies.js';
import { resultReleased } from './events.js';
import type { OrdersDeps } from './orders.js';
import { assertMay } from '@lab/permissions';
import { resultJoins, resultJson } from './render.js';

export interface ResultCaps {
  /** most result rows one GET /v1/lab-results answers (spec: 2000) */
  rows: number;
  /** most samples an order filter resolves to before results are read (spec: 1000) */
  samples: number;
}

export const DEFAULT_CAPS: ResultCaps = { rows: 2000, samples: 1000 };

const orderOr404 = async (tx: Tx, caller: CallerContext, orderId: string) => {
  const found = isGuid(orderId)
    ? await rows<{ id: string }>(tx, sql`select id from orders.lab_orders where org_id = ${caller.org_id}::uuid and id = ${orderId}::uuid`)
    : [];
  if (!found.length) throw DomainError.notFound('lab order not found');
};

async function renderResult(tx: Tx, caller: CallerContext, id: string): Promise<string> {
  const [row] = await rows<{ json: string }>(
    tx,
    sql`select ${resultJson}::text as json from orders.lab_results r ${resultJoins}
        where r.org_id = ${caller.org_id}::uuid and r.id = ${id}::uuid`,
  );
  return row!.json;
}

/**
 * POST /v1/lab-orders/{id}/results: a result for one of the order's samples,
 * stored as 'recorded' (not visible in /v1/lab-results until released).
 */
export async function recordResult(
  deps: OrdersDeps,
  caller: CallerContext,
  orderId: string,
  given: Record<string, unknown> | undefined,
): Promise<orders.ResultResponse> {
  assertMay(caller, 'write', 'lab orders');
  const body = parseWith(recordResultBody, structBody(given));
  return deps.outbox.write(
    caller,
    async (tx, emit) => {
      await orderOr404(tx, caller, orderId);
      const linked = await rows<{ one: number }>(
        tx,
        sql`select 1 as one from orders.order_samples
          where org_id = ${caller.org_id}::uuid and order_id = ${orderId}::uuid and sample_id = ${body.sample_id}::uuid`,
      );
      if (!linked.length) throw validationFailed([{ path: 'sample_id', message: 'is not a sample of this order' }]);
      const id = newId();
      await tx.execute(
        sql`insert into orders.lab_results
            (id, org_id, order_id, sample_id, analyte, value, unit, reference_range, flag, measured_at, created_by)
          values (${id}::uuid, ${caller.org_id}::uuid, ${orderId}::uuid, ${body.sample_id}::uuid, ${body.analyte},
                  ${JSON.stringify(body.value)}::jsonb, ${body.unit ?? null}, ${body.reference_range ?? null}, ${body.flag ?? null},
                  ${body.measured_at ?? null}::timestamptz, ${caller.user_id}::uuid)`,
      );
      const after = await renderResult(tx, caller, id);
      emit.audit(caller.org_id, { action: 'create', resource: 'lab_result', record_id: id, after: JSON.parse(after) as Record<string, unknown> });
      return { result: resultsFromJson(after)[0] };
    },
    (answer) => answer,
  );
}

/**
 * POST /v1/lab-orders/{id}/results/{result_id}/release: releases a recorded
 * result once. The update is conditional on status 'recorded', so of two
 * concurrent releases the second finds nothing to change: 409 already_released.
 */
export async function releaseResult(deps: OrdersDeps, caller: CallerContext, orderId: string, resultId: string): Promise<orders.ResultResponse> {
  // a quality decision, not a write: the roles the permission model names (admin, qm)
  assertMay(caller, 'release_result');
  if (!isGuid(orderId) || !isGuid(resultId)) throw DomainError.notFound('lab result not found');
  return deps.outbox.write(
    caller,
    async (tx, emit) => {
      const [before] = await rows<{ json: string; status: string }>(
        tx,
        sql`select ${resultJson}::text as json, r.status from orders.lab_results r ${resultJoins}
          where r.org_id = ${caller.org_id}::uuid and r.order_id = ${orderId}::uuid and r.id = ${resultId}::uuid`,
      );
      if (!before) throw DomainError.notFound('lab result not found');
      const won = await rows<{ id: string }>(
        tx,
        sql`update orders.lab_results set status = 'released', released_at = now(), released_by = ${caller.user_id}::uuid, updated_at = now()
          where org_id = ${caller.org_id}::uuid and id = ${resultId}::uuid and status = 'recorded'
          returning id`,
      );
      if (!won.length) throw DomainError.conflict('the result is already released', 'already_released');
      const after = await renderResult(tx, caller, resultId);
      const afterRow = JSON.parse(after) as Record<string, unknown>;
      resultReleased(emit, caller, afterRow);
      emit.audit(caller.org_id, {
        action: 'release',
        resource: 'lab_result',
        record_id: resultId,
        before: JSON.parse(before.json) as Record<string, unknown>,
        after: afterRow,
      });
      return { result: resultsFromJson(after)[0] };
    },
    (answer) => answer,
  );
}

export const rowsWarning = (cap: number) => `299 - "lab results capped at ${cap} rows"`;
export const samplesWarning = (cap: number) => `299 - "lab results sample lookup capped at ${cap} samples"`;

/**
 * GET /v1/lab-results: released results, oldest release first (so `since`
 * continues where a client left off). An order filter (order_id or
 * external_order_number) first resolves the orders' samples, at most
 * caps.samples of them; then at most caps.rows results are read. Either cap
 * cutting the answer short is said in `capped` / `sample_lookup_capped` and a
 * Warning value.
 */
export async function listResults(deps: OrdersDeps, caller: CallerContext, query: Record<string, string>, caps: ResultCaps) {
  const q = parseWith(listResultsQuery(caps.rows), query);
  const limit = q.limit ?? caps.rows;
  const conds: SQL[] = [sql`r.org_id = ${caller.org_id}::uuid`, sql`r.status = 'released'`];
  if (q.sample_id) conds.push(sql`r.sample_id = ${q.sample_id}::uuid`);
  if (q.since) conds.push(sql`r.released_at >= ${q.since}::timestamptz`);

  let sampleLookupCapped = false;
  if (q.order_id || q.external_order_number) {
    const orderConds: SQL[] = [sql`s.org_id = ${caller.org_id}::uuid`];
    if (q.order_id) orderConds.push(sql`o.id = ${q.order_id}::uuid`);
    if (q.external_order_number) orderConds.push(sql`o.external_order_number = ${q.external_order_number}`);
    const lookup = (n: number) =>
      sql`select s.sample_id from orders.order_samples s join orders.lab_orders o on o.org_id = s.org_id and o.id = s.order_id
          where ${sql.join(orderConds, sql` and `)} order by s.created_at, s.order_id, s.position limit ${n}`;
    const [found] = await deps.db.rows<{ n: number }>(sql`select count(*)::int as n from (${lookup(caps.samples + 1)}) x`);
    sampleLookupCapped = found!.n > caps.samples;
    conds.push(sql`r.sample_id in (${lookup(caps.samples)})`);
  }

  const where = sql.join(conds, sql` and `);
  const [count] = await deps.db.rows<{ total: number }>(sql`select count(*)::int as total from orders.lab_results r where ${where}`);
  const [page] = await deps.db.rows<{ json: string }>(
    sql`select coalesce(json_agg(p.j order by p.released_at, p.id), '[]'::json)::text as json
        from (select r.released_at, r.id, ${resultJson} as j from orders.lab_results r ${resultJoins} where ${where}
              order by r.released_at, r.id limit ${limit} offset ${q.offset}) p`,
  );
  const total = count!.total;
  // The cap cut the answer short when the client did not ask for fewer and more remain.
  const capped = limit >= caps.rows && total > q.offset + limit;
  const warnings = [...(capped ? [rowsWarning(caps.rows)] : []), ...(sampleLookupCapped ? [samplesWarning(caps.samples)] : [])];
  return { results: resultsFromJson(page!.json), total, limit, offset: q.offset, capped, sample_lookup_capped: sampleLookupCapped, warnings };
}
