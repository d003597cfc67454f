import { orderJson, resultJson } from '@lab/contracts';
import { type LabOrderOp, type Reply, itemFromJson, JSON_TYPE, listFromJson, withLocation } from '@lab/http-api';
import { callerIn, type Ctx, type Deps } from '../request.js';
import { objectBody, queryMap, recordId } from './records.js';

const CREATE_DEADLINE_MS = 120_000;

/**
 * Lab orders and lab results (module sample_intake), served by the orders
 * service. Bodies and queries are validated there; the gateway forwards them
 * and writes the typed orders and results it gets back as JSON. A capped list of released results
 * carries its Warning values as the HTTP Warning header.
 */
export async function labOrderHandler(ctx: Ctx, deps: Deps, op: LabOrderOp): Promise<Reply> {
  const client = deps.clients.orders();
  const caller = callerIn(ctx);
  switch (op) {
    case 'create': {
      // up to 200 samples are created one by one in the notebook: more than the default deadline
      const r = await client.call('createOrder', { body: objectBody(ctx.body) }, caller, CREATE_DEADLINE_MS);
      return withLocation(itemFromJson(201, orderJson(r.order!, true)), ctx.req.path, r.order!.id);
    }
    case 'list': {
      const r = await client.call('listOrders', { query: queryMap(ctx.req.query as Record<string, unknown>) }, caller);
      // a list leaves out the samples (sample_count says how many)
      return listFromJson(`[${r.orders.map((o) => orderJson(o, false)).join(',')}]`, { limit: r.limit, offset: r.offset, total: r.total });
    }
    case 'get': {
      const r = await client.call('getOrder', { id: recordId(ctx.params) }, caller);
      return itemFromJson(200, orderJson(r.order!, true));
    }
    case 'record_result': {
      const r = await client.call('recordResult', { order_id: recordId(ctx.params), body: objectBody(ctx.body) }, caller);
      return itemFromJson(201, resultJson(r.result!));
    }
    case 'release_result': {
      const r = await client.call('releaseResult', { order_id: recordId(ctx.params), result_id: recordId(ctx.params, 'result_id') }, caller);
      return itemFromJson(200, resultJson(r.result!));
    }
    case 'list_results': {
      const r = await client.call('listResults', { query: queryMap(ctx.req.query as Record<string, unknown>) }, caller);
      const pagination = { limit: r.limit, offset: r.offset, total: r.total, capped: r.capped, sample_lookup_capped: r.sample_lookup_capped };
      return {
        status: 200,
        body: `{"data":[${r.results.map(resultJson).join(',')}],"pagination":${JSON.stringify(pagination)}}`,
        contentType: JSON_TYPE,
        ...(r.warnings.length ? { headers: { Warning: r.warnings.join(', ') } } : {}),
      };
    }
  }
}
