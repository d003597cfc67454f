import { pointJson, telemetryItemJson, telemetryListJson, type telemetry } from '@lab/contracts';
import { type TelemetryAdminOp, type TelemetryOp, itemFromJson, json, listFromJson, noContent, withLocation, type Reply } from '@lab/http-api';
import { isUuid } from '@lab/kit';
import { callerIn, type Ctx, type Deps } from '../request.js';
import { objectBody, queryMap, recordId } from './records.js';
import { requireKnownOrg } from './known-org.js';
import { adminPage } from './admin-page.js';

/** A page as the list envelope, its records written as the API shows them. */
const list = (r: telemetry.ListResponse): Reply => listFromJson(telemetryListJson(r.page), { limit: r.limit, offset: r.offset, total: r.total ?? null });
/** A single answer's resource under data. */
const itemOf = (status: number, r: telemetry.ItemResponse): Reply => itemFromJson(status, telemetryItemJson(r.item));

/** The id of the resource a single answer holds (a heartbeat's is its connector's). */
function idOf(r: telemetry.ItemResponse): string {
  const item = r.item;
  if (item?.$case === 'connector_heartbeat') return item.value.connector?.id ?? '';
  return (item?.value as { id?: string } | undefined)?.id ?? '';
}

/** /v1 telemetry routes onto the service's RPCs: bodies go as given (a Struct), typed answers come back as the API's JSON. */
export async function telemetryHandler(ctx: Ctx, deps: Deps, op: TelemetryOp): Promise<Reply> {
  const c = deps.clients.telemetry();
  const caller = callerIn(ctx);
  const body = () => ({ body: objectBody(ctx.body) });
  const query = () => ({ query: queryMap(ctx.req.query) });
  const id = () => ({ id: recordId(ctx.params) });
  switch (op) {
    case 'listPoints':
    case 'listReadings':
    case 'listDevices':
    case 'listResults':
    case 'listConnectors':
      return list(await c.call(op, query(), caller));
    case 'ingestReadings':
    case 'registerDevice':
      return itemOf(201, await c.call(op, body(), caller));
    case 'ingestResult': {
      const r = await c.call(op, body(), caller);
      return withLocation(itemOf(201, r), ctx.req.path, idOf(r));
    }
    case 'connectorHeartbeat': {
      const r = await c.call(op, body(), caller);
      // the heartbeat that registered the connector answers where it now is
      return r.created ? withLocation(itemOf(201, r), ctx.req.path, idOf(r)) : itemOf(200, r);
    }
    case 'getResult':
    case 'getResultChart':
    case 'getConnector':
      return itemOf(200, await c.call(op, id(), caller));
    case 'deleteDevice':
    case 'deleteConnector':
      await c.call(op, id(), caller);
      return noContent();
  }
}

/** /admin/v1/orgs/{org_id}/environmental-points[/{point_id}]. */
export async function telemetryAdminHandler(ctx: Ctx, deps: Deps, op: TelemetryAdminOp): Promise<Reply> {
  const raw = ctx.params.org_id ?? '';
  if (!isUuid(raw)) return json(404, { error: { code: 'not_found', message: 'organisation not found' } });
  const org_id = raw.toLowerCase();
  const point_id = op === 'updatePoint' || op === 'deletePoint' ? recordId(ctx.params, 'point_id') : '';
  await requireKnownOrg(org_id, ctx, deps);
  const c = deps.clients.telemetry();
  switch (op) {
    case 'adminListPoints': {
      const p = adminPage(ctx);
      return list(await c.call('adminListPoints', { org_id, ...p }, callerIn(ctx)));
    }
    case 'deletePoint': {
      const r = await c.call('deletePoint', { org_id, point_id }, callerIn(ctx));
      // a point with readings stays, deactivated: the answer shows it
      return r.deleted ? noContent() : itemFromJson(200, pointJson(r.point!));
    }
    case 'createPoint':
    case 'updatePoint': {
      const r = await c.call(op, { org_id, point_id, body: objectBody(ctx.body) }, callerIn(ctx));
      return itemOf(op === 'createPoint' ? 201 : 200, r);
    }
  }
}
