import { nullableOf as nullable, schemaRef as ref, TIME, UUID, type Json } from './openapi-parts.js';

/**
 * The answers of the orders service (module sample_intake) as it renders them
 * (services/orders/src/render.ts: orderJson, resultJson), closed, for the
 * OpenAPI document; the request bodies are in handlers/lab-orders.ts.
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

/** The released-results list with its items typed (its pagination as handlers/lab-orders.ts states it). */
export function typedResultList(list: Json): Json {
  const properties = list.properties as Record<string, Json>;
  return { ...list, properties: { ...properties, data: { type: 'array', items: ref('LabResult') } }, additionalProperties: false };
}
