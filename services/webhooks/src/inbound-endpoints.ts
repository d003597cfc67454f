import { z } from 'zod';
import { sql } from 'drizzle-orm';
import type { webhooks } from '@lab/contracts';
import { assertOperator, DomainError, parseWith, rows, type CallerContext, type ServiceDeps } from '@lab/kit';
import { pageOf, parseItem, parsePage, rotateSecret } from './admin-common.js';
import { ENDPOINT_COLUMNS, toEndpoint, type EndpointViewRow } from './endpoint-view.js';
import { allowedEventTypes, endpointJobType } from './inbound.js';
import { MANAGING_WEBHOOKS, generateSecret } from './management.js';

/**
 * Reading and undoing inbound endpoints (operator token). The slug is not
 * changed here: senders have the URL made from it configured.
 */
const TABLE = sql`webhooks.inbound_endpoints`;
const notFound = () => DomainError.notFound('inbound webhook endpoint not found');
const snapshot = (r: EndpointViewRow) => ({ id: r.id, slug: r.slug, allowed_event_types: r.allowed_event_types, job_type: r.job_type, active: r.active });

export async function listInboundEndpoints(
  deps: ServiceDeps,
  caller: CallerContext,
  req: webhooks.PageRequest,
): Promise<webhooks.ListInboundEndpointsResponse> {
  assertOperator(caller, MANAGING_WEBHOOKS);
  const r = await pageOf<EndpointViewRow>(deps.db.orm, TABLE, ENDPOINT_COLUMNS, parsePage(req));
  return { endpoints: r.rows.map(toEndpoint), page: r.page };
}

export async function getInboundEndpoint(deps: ServiceDeps, caller: CallerContext, req: webhooks.ItemRequest): Promise<webhooks.InboundEndpoint> {
  assertOperator(caller, MANAGING_WEBHOOKS);
  const { org_id, id } = parseItem(req, 'inbound webhook endpoint');
  const [row] = await deps.db.rows<EndpointViewRow>(sql`select ${ENDPOINT_COLUMNS} from ${TABLE} where org_id = ${org_id}::uuid and id = ${id}::uuid`);
  if (!row) throw notFound();
  return toEndpoint(row);
}

const updateBody = z
  .object({
    allowed_event_types: z.object({ values: allowedEventTypes }).optional(),
    job_type: endpointJobType.optional(),
    clear_job_type: z.boolean(),
    active: z.boolean().optional(),
  })
  .refine(
    (b) => b.allowed_event_types !== undefined || b.job_type !== undefined || b.clear_job_type || b.active !== undefined,
    'nothing to change: give allowed_event_types, job_type or active',
  );

/** Changes what an endpoint accepts, the job it makes, or whether it answers at all (inactive: 404 to senders). */
export async function updateInboundEndpoint(
  deps: ServiceDeps,
  caller: CallerContext,
  req: webhooks.UpdateInboundEndpointRequest,
): Promise<webhooks.InboundEndpoint> {
  assertOperator(caller, MANAGING_WEBHOOKS);
  const { org_id, id } = parseItem(req, 'inbound webhook endpoint');
  const b = parseWith(updateBody, {
    allowed_event_types: req.allowed_event_types,
    job_type: req.job_type,
    clear_job_type: req.clear_job_type,
    active: req.active,
  });
  const sets = [sql`updated_at = now()`];
  if (b.allowed_event_types) sets.push(sql`allowed_event_types = string_to_array(${[...new Set(b.allowed_event_types.values)].join(',')}, ',')`);
  if (b.job_type !== undefined) sets.push(sql`job_type = ${b.job_type}`);
  else if (b.clear_job_type) sets.push(sql`job_type = null`);
  if (b.active !== undefined) sets.push(sql`active = ${b.active}`);
  return deps.outbox.write(caller, async (tx, emit) => {
    const [before] = await rows<EndpointViewRow>(
      tx,
      sql`select ${ENDPOINT_COLUMNS} from ${TABLE} where org_id = ${org_id}::uuid and id = ${id}::uuid for update`,
    );
    if (!before) throw notFound();
    const [after] = await rows<EndpointViewRow>(
      tx,
      sql`update ${TABLE} set ${sql.join(sets, sql`, `)} where org_id = ${org_id}::uuid and id = ${id}::uuid returning ${ENDPOINT_COLUMNS}`,
    );
    emit.audit(org_id, { action: 'update', resource: 'inbound_endpoint', record_id: id, before: snapshot(before), after: snapshot(after!) });
    return toEndpoint(after!);
  });
}

/** Deletes an endpoint and the events it received (foreign key cascade); its URL answers 404 from now on. */
export async function deleteInboundEndpoint(deps: ServiceDeps, caller: CallerContext, req: webhooks.ItemRequest): Promise<webhooks.Empty> {
  assertOperator(caller, MANAGING_WEBHOOKS);
  const { org_id, id } = parseItem(req, 'inbound webhook endpoint');
  await deps.outbox.write(caller, async (tx, emit) => {
    const [gone] = await rows<EndpointViewRow>(tx, sql`delete from ${TABLE} where org_id = ${org_id}::uuid and id = ${id}::uuid returning ${ENDPOINT_COLUMNS}`);
    if (!gone) throw notFound();
    emit.audit(org_id, { action: 'delete', resource: 'inbound_endpoint', record_id: id, before: snapshot(gone) });
  });
  return {};
}

/** A new generated secret verifies from now on; the replaced one is accepted beside it for 24 hours. */
export async function rotateInboundSecret(deps: ServiceDeps, caller: CallerContext, req: webhooks.ItemRequest): Promise<webhooks.RotatedSecret> {
  assertOperator(caller, MANAGING_WEBHOOKS);
  const { org_id, id } = parseItem(req, 'inbound webhook endpoint');
  return rotateSecret(deps, caller, { table: TABLE, resource: 'inbound_endpoint', org_id, id, notFound }, sql`${generateSecret()}`);
}
