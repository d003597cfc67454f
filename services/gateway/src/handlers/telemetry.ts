import { isUuid } from '@lab/kit';
import { json, listFromJson, noContent, type Reply } from '../replies.js';
import { callerIn, type Ctx, type Deps } from '../request.js';
import { objectBody, queryMap, recordId } from './records.js';
import { requireKnownOrg } from './known-org.js';
import { adminPage } from './admin-page.js';

/** Operations of the telemetry service behind /v1 (module analytics_qc). */
export type TelemetryOp =
  | 'listPoints'
  | 'ingestReadings'
  | 'listReadings'
  | 'registerDevice'
  | 'listDevices'
  | 'deleteDevice'
  | 'ingestResult'
  | 'listResults'
  | 'getResult'
  | 'getResultChart'
  | 'connectorHeartbeat'
  | 'listConnectors'
  | 'getConnector'
  | 'deleteConnector';

/** Management of environmental points (operator token). */
export type TelemetryAdminOp = 'createPoint' | 'updatePoint' | 'adminListPoints' | 'deletePoint';

const JSON_TYPE = 'application/json; charset=utf-8';
const item = (status: number, objectJson: string): Reply => ({ status, body: `{"data":${objectJson}}`, contentType: JSON_TYPE });

/** /v1 telemetry routes onto the service's RPCs; bodies and answers stay JSON text. */
export async function telemetryHandler(ctx: Ctx, deps: Deps, op: TelemetryOp): Promise<Reply> {
  const c = deps.clients.telemetry();
  const caller = callerIn(ctx);
  const body = () => ({ json: JSON.stringify(objectBody(ctx.body)) });
  const query = () => ({ query: queryMap(ctx.req.query) });
  const id = () => ({ id: recordId(ctx.params) });
  const list = (r: { json: string; limit: number; offset: number; total?: number }) =>
    listFromJson(r.json, { limit: r.limit, offset: r.offset, total: r.total ?? null });
  switch (op) {
    case 'listPoints':
    case 'listReadings':
    case 'listDevices':
    case 'listResults':
    case 'listConnectors':
      return list(await c.call(op, query(), caller));
    case 'ingestReadings':
    case 'registerDevice':
    case 'ingestResult':
      return item(201, (await c.call(op, body(), caller)).json);
    case 'connectorHeartbeat': {
      const r = await c.call(op, body(), caller);
      return item(r.created ? 201 : 200, r.json);
    }
    case 'getResult':
    case 'getResultChart':
    case 'getConnector':
      return item(200, (await c.call(op, id(), caller)).json);
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
      const r = await c.call('adminListPoints', { org_id, ...p }, callerIn(ctx));
      return listFromJson(r.json, { limit: r.limit, offset: r.offset, total: r.total ?? null });
    }
    case 'deletePoint': {
      const r = await c.call('deletePoint', { org_id, point_id, json: '' }, callerIn(ctx));
      // a point with readings stays, deactivated: the answer shows it
      return r.deleted ? noContent() : item(200, r.json!);
    }
    case 'createPoint':
    case 'updatePoint': {
      const r = await c.call(op, { org_id, point_id, json: JSON.stringify(objectBody(ctx.body)) }, callerIn(ctx));
      return item(op === 'createPoint' ? 201 : 200, r.json);
    }
  }
}
