import { orderJson, resultJson } from '@lab/contracts';
import type { Reply } from '../replies.js';
import { itemFromJson, listFromJson, withLocation } from '../replies.js';
import { callerIn, type Ctx, type Deps } from '../request.js';
import { objectBody, queryMap, recordId } from './records.js';

/**
 * Lab orders and lab results (module sample_intake), served by the orders
 * service. Bodies and queries are validated there; the gateway forwards them
 * and writes the typed orders and results it gets back as JSON. A capped list of released results
 * carries its Warning values as the HTTP Warning header.
 */
export type LabOrderOp = 'create' | 'list' | 'get' | 'record_result' | 'release_result' | 'list_results';

const JSON_TYPE = 'application/json; charset=utf-8';
const CREATE_DEADLINE_MS = 120_000;

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

// ------------------------------------------------ documentation (OpenAPI)

type Json = Record<string, unknown>;
const str = (maxLength: number, minLength = 1): Json => ({ type: 'string', minLength, maxLength });
const nullableStr = (maxLength: number): Json => ({ type: ['string', 'null'], maxLength });
const UUID = { type: 'string', format: 'uuid' };
const int = (minimum: number, maximum?: number, dflt?: number): Json => ({
  type: 'integer',
  minimum,
  ...(maximum !== undefined ? { maximum } : {}),
  ...(dflt !== undefined ? { default: dflt } : {}),
});

/** The bodies the orders service accepts, as documented in the OpenAPI document. */
export const LAB_ORDER_SCHEMAS: Record<string, Json> = {
  LabOrderCreate: {
    type: 'object',
    description:
      'A lab order with its samples. Give the requester as an object or as requester_name (exactly one). Each sample is created in the notebook ' +
      '(visible under /v1/samples, event sample.created) and linked to the order. external_order_number is unique per organisation (409 duplicate_order); ' +
      'an order whose sample creation failed is kept with status failed and does not hold its number.',
    required: ['external_order_number', 'samples'],
    additionalProperties: false,
    properties: {
      external_order_number: str(100),
      requester: {
        type: 'object',
        required: ['name'],
        additionalProperties: false,
        properties: { name: str(200), email: { type: ['string', 'null'], format: 'email', maxLength: 320 }, organisation: nullableStr(200) },
      },
      requester_name: str(200),
      priority: { type: 'string', enum: ['routine', 'urgent', 'stat'], default: 'routine' },
      notes: nullableStr(10_000),
      samples: {
        type: 'array',
        minItems: 1,
        maxItems: 200,
        items: {
          type: 'object',
          required: ['name'],
          additionalProperties: false,
          properties: {
            name: str(500),
            type: nullableStr(200),
            metadata: { type: 'object', additionalProperties: true },
            external_sample_id: { type: ['string', 'null'], minLength: 1, maxLength: 200, description: 'unique within the order' },
          },
        },
      },
    },
  },
  LabResultCreate: {
    type: 'object',
    description: 'A result for one sample of the order; stored with status recorded, listed under /v1/lab-results once released.',
    required: ['sample_id', 'analyte', 'value'],
    additionalProperties: false,
    properties: {
      sample_id: { ...UUID, description: 'a sample of this order' },
      analyte: str(200),
      value: { oneOf: [{ type: 'number' }, { type: 'string', maxLength: 10_000 }] },
      unit: nullableStr(64),
      reference_range: nullableStr(200),
      flag: nullableStr(32),
      measured_at: { type: ['string', 'null'], format: 'date-time' },
    },
  },
  LabResultList: {
    type: 'object',
    required: ['data', 'pagination'],
    properties: {
      data: { type: 'array', items: { type: 'object' } },
      pagination: {
        type: 'object',
        required: ['limit', 'offset', 'total', 'capped', 'sample_lookup_capped'],
        properties: {
          limit: { type: 'integer' },
          offset: { type: 'integer' },
          total: { type: 'integer' },
          capped: { type: 'boolean', description: 'more released results match than the row cap (2000) let through' },
          sample_lookup_capped: { type: 'boolean', description: 'the order filter matched more samples than the lookup cap (1000)' },
        },
      },
    },
  },
};

const q = (name: string, schema: Json, description?: string): Json => ({ name, in: 'query', required: false, schema, ...(description ? { description } : {}) });

/** What each operation takes and answers, for openapi.ts. */
export function describeLabOrderOp(op: LabOrderOp): {
  successStatus: string;
  successDescription: string;
  successSchemaRef: string;
  bodyRef?: string;
  query?: Json[];
  warningHeader?: boolean;
} {
  switch (op) {
    case 'create':
      return { successStatus: '201', successDescription: 'the order (status received) with its samples', successSchemaRef: 'Item', bodyRef: 'LabOrderCreate' };
    case 'list':
      return {
        successStatus: '200',
        successDescription: 'orders, newest first, without their samples (sample_count)',
        successSchemaRef: 'List',
        query: [
          q('limit', int(1, 500, 50)),
          q('offset', int(0, undefined, 0)),
          q('status', { type: 'string', enum: ['receiving', 'received', 'failed'] }),
          q('priority', { type: 'string', enum: ['routine', 'urgent', 'stat'] }),
          q('external_order_number', str(100)),
        ],
      };
    case 'get':
      return { successStatus: '200', successDescription: 'the order with its samples (sample ids and order-sample fields)', successSchemaRef: 'Item' };
    case 'record_result':
      return { successStatus: '201', successDescription: 'the result, status recorded', successSchemaRef: 'Item', bodyRef: 'LabResultCreate' };
    case 'release_result':
      return {
        successStatus: '200',
        successDescription:
          'the released result (role admin or qm; a token without a user needs the admin scope); emits lab_result.released; 409 already_released',
        successSchemaRef: 'Item',
      };
    case 'list_results':
      return {
        successStatus: '200',
        successDescription:
          'released results, oldest release first; at most 2000 rows, and an order filter resolves at most 1000 samples first; a cap that cuts the answer short sets pagination.capped / sample_lookup_capped and the Warning header',
        successSchemaRef: 'LabResultList',
        warningHeader: true,
        query: [
          q('order_id', UUID),
          q('external_order_number', str(100)),
          q('sample_id', UUID),
          q('since', { type: 'string', format: 'date-time' }, 'released at or after'),
          q('limit', int(1, 2000), 'default and maximum: the row cap (2000)'),
          q('offset', int(0, undefined, 0)),
        ],
      };
  }
}
