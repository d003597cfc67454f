// Written by hand: how lab orders and lab results (lab.orders.v1) map to and
// from the JSON the public API has always answered (as PostgreSQL rendered them
// with json_build_object in the orders service).
import { OrderPriority, OrderStatus, ResultStatus, type LabOrder, type LabResult, type OrderSample, type Requester } from './lab/orders/v1/orders.js';
import { enumWords, messageFromRow, messageJson, messageShape, type RecordObject } from './record-json.js';

const ORDER_STATUS = enumWords<OrderStatus>(OrderStatus, 'ORDER_STATUS_');
const PRIORITY = enumWords<OrderPriority>(OrderPriority, 'ORDER_PRIORITY_');
const RESULT_STATUS = enumWords<ResultStatus>(ResultStatus, 'RESULT_STATUS_');

const PLAIN = messageShape([]);
const ORDER = messageShape(['created_at', 'updated_at', 'received_at']);
const RESULT_TIMES = ['measured_at', 'released_at', 'created_at', 'updated_at'];
const RESULT = messageShape(RESULT_TIMES);
/** a result whose value is a number: written as the decimal text it holds */
const NUMERIC_RESULT = messageShape(RESULT_TIMES, ['value']);

/** An order as PostgreSQL rendered it (parsed), as the message; samples only when the row has them. */
export function orderFromRow(row: RecordObject): LabOrder {
  const fields = messageFromRow(ORDER, row);
  return {
    ...fields,
    status: ORDER_STATUS.value(row.status),
    priority: PRIORITY.value(row.priority),
    requester: messageFromRow(PLAIN, row.requester as RecordObject) as unknown as Requester,
    samples: ((row.samples as RecordObject[] | undefined) ?? []).map((s) => messageFromRow(PLAIN, s) as unknown as OrderSample),
  } as unknown as LabOrder;
}

/** An order as the JSON text clients have always been answered; with its samples for one order, without in lists. */
export function orderJson(o: LabOrder, withSamples: boolean): string {
  const r = o.requester;
  const fields: RecordObject = {
    id: o.id,
    external_order_number: o.external_order_number,
    status: ORDER_STATUS.word(o.status),
    priority: PRIORITY.word(o.priority),
    requester: { name: r?.name ?? null, email: r?.email ?? null, organisation: r?.organisation ?? null },
    notes: o.notes,
    error: o.error,
    sample_count: o.sample_count,
    created_by: o.created_by,
    created_at: o.created_at,
    updated_at: o.updated_at,
    received_at: o.received_at,
  };
  if (withSamples) {
    fields.samples = o.samples.map((s) => ({
      sample_id: s.sample_id,
      position: s.position,
      name: s.name,
      type: s.type ?? null,
      external_sample_id: s.external_sample_id ?? null,
    }));
  }
  return messageJson(ORDER, fields);
}

/** A numeric result value as read from the text: the digits PostgreSQL wrote. */
interface NumberText {
  $number: string;
}

/**
 * Results as PostgreSQL rendered them (one object or an array of them), as
 * messages; a numeric value keeps its digits (5.10 stays 5.10).
 */
export function resultsFromJson(json: string): LabResult[] {
  const parsed = JSON.parse(json, (key, value: unknown, context?: { source?: string }) =>
    key === 'value' && typeof value === 'number' && context?.source !== undefined ? ({ $number: context.source } satisfies NumberText) : value,
  ) as RecordObject | RecordObject[];
  return (Array.isArray(parsed) ? parsed : [parsed]).map((row) => {
    const { value, ...rest } = row;
    const fields = messageFromRow(RESULT, rest);
    const number = value !== null && typeof value === 'object' ? (value as NumberText).$number : undefined;
    return {
      ...fields,
      value: number !== undefined ? { $case: 'number', value: number } : { $case: 'text', value: String(value) },
      status: RESULT_STATUS.value(row.status),
    } as unknown as LabResult;
  });
}

/** A result as the JSON text clients have always been answered. */
export function resultJson(r: LabResult): string {
  const fields: RecordObject = {
    id: r.id,
    order_id: r.order_id,
    external_order_number: r.external_order_number,
    sample_id: r.sample_id,
    external_sample_id: r.external_sample_id,
    analyte: r.analyte,
    value: r.value?.value,
    unit: r.unit,
    reference_range: r.reference_range,
    flag: r.flag,
    measured_at: r.measured_at,
    status: RESULT_STATUS.word(r.status),
    released_at: r.released_at,
    released_by: r.released_by,
    created_by: r.created_by,
    created_at: r.created_at,
    updated_at: r.updated_at,
  };
  return messageJson(r.value?.$case === 'number' ? NUMERIC_RESULT : RESULT, fields);
}
