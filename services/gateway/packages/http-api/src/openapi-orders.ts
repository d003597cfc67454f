import { createOrderBody, recordResultBody } from '@lab/orders/bodies';
import type { LabOrderOp } from './operations.js';
import { jsonSchemaOf, nullableOf as nullable, schemaRef as ref, TIME, UUID, type Json } from './openapi-parts.js';

/**
 * The answers of the orders service (module sample_intake) as it renders them
 * (services/orders/src/render.ts: orderJson, resultJson), closed, for the
 * OpenAPI document, and what each operation takes.
 */
const closed = (properties: Record<string, Json>, optional: string[] = []): Json => ({
  type: 'object',
  required: Object.keys(properties).filter((k) => !optional.includes(k)),
  properties,
  additionalProperties: false,
});

const ORDER_SAMPLE = closed({
  sample_id: UUID,
  position: { type: 'integer' },
  name: { type: 'string' },
  type: nullable({ type: 'string' }),
  external_sample_id: nullable({ type: 'string' }),
});

export const ORDER_SCHEMAS: Record<string, Json> = {
  LabOrder: closed(
    {
      id: { ...UUID, readOnly: true },
      external_order_number: { type: 'string' },
      status: { type: 'string', enum: ['receiving', 'received', 'failed'], readOnly: true },
      priority: { type: 'string', enum: ['routine', 'urgent', 'stat'] },
      requester: closed({ name: { type: 'string' }, email: nullable({ type: 'string' }), organisation: nullable({ type: 'string' }) }),
      notes: nullable({ type: 'string' }),
      error: { ...nullable({ type: 'object' }), readOnly: true, description: 'why the order failed (status failed)' },
      sample_count: { type: 'integer', minimum: 0, readOnly: true },
      created_by: { ...nullable(UUID), readOnly: true },
      created_at: { ...TIME, readOnly: true },
      updated_at: { ...TIME, readOnly: true },
      received_at: { ...nullable(TIME), readOnly: true },
      samples: { type: 'array', items: ORDER_SAMPLE, description: 'in the answer of a create and a read, not in lists' },
    },
    ['samples'],
  ),
  LabResult: closed({
    id: { ...UUID, readOnly: true },
    order_id: UUID,
    external_order_number: { type: 'string' },
    sample_id: UUID,
    external_sample_id: nullable({ type: 'string' }),
    analyte: { type: 'string' },
    value: { type: ['number', 'string'] },
    unit: nullable({ type: 'string' }),
    reference_range: nullable({ type: 'string' }),
    flag: nullable({ type: 'string' }),
    measured_at: nullable(TIME),
    status: { type: 'string', enum: ['recorded', 'released'], readOnly: true },
    released_at: { ...nullable(TIME), readOnly: true },
    released_by: { ...nullable(UUID), readOnly: true },
    created_by: { ...nullable(UUID), readOnly: true },
    created_at: { ...TIME, readOnly: true },
    updated_at: { ...TIME, readOnly: true },
  }),
};
ORDER_SCHEMAS.LabOrderItem = closed({ data: ref('LabOrder') });
ORDER_SCHEMAS.LabOrderList = closed({ data: { type: 'array', items: ref('LabOrder') }, pagination: ref('Pagination') });
ORDER_SCHEMAS.LabResultItem = closed({ data: ref('LabResult') });

/** The typed answer of each lab order operation that answers the generic envelope. */
export const ORDER_ANSWERS: Record<string, string> = {
  create: 'LabOrderItem',
  list: 'LabOrderList',
  get: 'LabOrderItem',
  record_result: 'LabResultItem',
  release_result: 'LabResultItem',
};

/** The released-results list with its items typed (its pagination as the gateway's handlers/lab-orders.ts states it). */
export function typedResultList(list: Json): Json {
  const properties = list.properties as Record<string, Json>;
  return { ...list, properties: { ...properties, data: { type: 'array', items: ref('LabResult') } }, additionalProperties: false };
}

const str = (maxLength: number, minLength = 1): Json => ({ type: 'string', minLength, maxLength });
const int = (minimum: number, maximum?: number, dflt?: number): Json => ({
  type: 'integer',
  minimum,
  ...(maximum !== undefined ? { maximum } : {}),
  ...(dflt !== undefined ? { default: dflt } : {}),
});

/** The bodies of the orders service, from the zod schemas it validates them with (services/orders/src/bodies.ts). */
export const LAB_ORDER_SCHEMAS: Record<string, Json> = {
  LabOrderCreate: {
    ...jsonSchemaOf(createOrderBody),
    description:
      'A lab order with its samples. Give the requester as an object or as requester_name (exactly one). Each sample is created in the notebook ' +
      '(visible under /v1/samples, event sample.created) and linked to the order. external_order_number is unique per organisation (409 duplicate_order); ' +
      'an order whose sample creation failed is kept with status failed and does not hold its number.',
  },
  LabResultCreate: {
    ...jsonSchemaOf(recordResultBody),
    description: 'A result for one sample of the order; stored with status recorded, listed under /v1/lab-results once released.',
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
