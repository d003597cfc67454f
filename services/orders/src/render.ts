import { sql } from 'drizzle-orm';

/**
 * How orders and results leave the service: PostgreSQL renders them to JSON
 * itself (timestamps in ISO 8601 with offset), so nothing is parsed and
 * re-serialised on the way out.
 */

/** One order `o` (alias) as a JSON object; with its samples when asked. */
export const orderJson = (withSamples: boolean) => sql`json_build_object(
    'id', o.id,
    'external_order_number', o.external_order_number,
    'status', o.status,
    'priority', o.priority,
    'requester', json_build_object('name', o.requester_name, 'email', o.requester_email, 'organisation', o.requester_organisation),
    'notes', o.notes,
    'error', o.error,
    'sample_count', o.sample_count,
    'created_by', o.created_by,
    'created_at', o.created_at,
    'updated_at', o.updated_at,
    'received_at', o.received_at
    ${withSamples ? sql`, 'samples', ${orderSamplesJson}` : sql``})`;

/** The samples of order `o`, in the order of the request body. */
const orderSamplesJson = sql`coalesce((
    select json_agg(json_build_object(
        'sample_id', s.sample_id, 'position', s.position, 'name', s.name, 'type', s.type,
        'external_sample_id', s.external_sample_id) order by s.position)
    from orders.order_samples s where s.org_id = o.org_id and s.order_id = o.id), '[]'::json)`;

/** One result `r` as a JSON object, with the order number and external sample id. */
export const resultJson = sql`json_build_object(
    'id', r.id,
    'order_id', r.order_id,
    'external_order_number', o.external_order_number,
    'sample_id', r.sample_id,
    'external_sample_id', s.external_sample_id,
    'analyte', r.analyte,
    'value', r.value,
    'unit', r.unit,
    'reference_range', r.reference_range,
    'flag', r.flag,
    'measured_at', r.measured_at,
    'status', r.status,
    'released_at', r.released_at,
    'released_by', r.released_by,
    'created_by', r.created_by,
    'created_at', r.created_at,
    'updated_at', r.updated_at)`;

/** The joins resultJson needs, after `from orders.lab_results r`. */
export const resultJoins = sql`join orders.lab_orders o on o.org_id = r.org_id and o.id = r.order_id
    join orders.order_samples s on s.org_id = r.org_id and s.order_id = r.order_id and s.sample_id = r.sample_id`;
