import type { CallerContext, Emitter } from '@lab/kit';

/**
 * Domain events of the orders service (additions to the spec's event list;
 * routing key = event name). Payloads are the rendered records' fields.
 */
type Json = Record<string, unknown>;

const pick = (row: Json, keys: string[]) => Object.fromEntries(keys.map((k) => [k, row[k] ?? null]));

export function orderCreated(emit: Emitter, caller: CallerContext, order: Json): void {
  const samples = (order.samples as { sample_id: string }[] | undefined) ?? [];
  emit.event('lab_order.created', caller.org_id, {
    ...pick(order, ['id', 'external_order_number', 'status', 'priority', 'requester', 'sample_count', 'created_by', 'created_at']),
    sample_ids: samples.map((s) => s.sample_id),
  });
}

export function resultReleased(emit: Emitter, caller: CallerContext, result: Json): void {
  emit.event(
    'lab_result.released',
    caller.org_id,
    pick(result, [
      'id',
      'order_id',
      'external_order_number',
      'sample_id',
      'external_sample_id',
      'analyte',
      'value',
      'unit',
      'reference_range',
      'flag',
      'measured_at',
      'released_at',
      'released_by',
    ]),
  );
}
