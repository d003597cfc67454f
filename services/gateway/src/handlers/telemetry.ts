import { isUuid } from '@lab/kit';
import { json, listFromJson, noContent, type Reply } from '../replies.js';
import { callerIn, type Ctx, type Deps } from '../request.js';
import { objectBody, queryMap, recordId } from './records.js';
import { requireKnownOrg } from './known-org.js';

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
export type TelemetryAdminOp = 'createPoint' | 'updatePoint';

const JSON_TYPE = 'application/json; charset=utf-8';
const item = (status: number, objectJson: string): Reply => ({ status, body: `{"data":${objectJson}}`, contentType: JSON_TYPE });

/** /v1 telemetry routes onto the service's RPCs; bodies and answers stay JSON text. */
export async function telemetryHandler(ctx: Ctx, deps: Deps, op: TelemetryOp): Promise<Reply> {
  const c = deps.clients.telemetry();
  const caller = callerIn(ctx);
  const body = () => ({ json: JSON.stringify(objectBody(ctx.body)) });
  const query = () => ({ query: queryMap(ctx.req.query as Record<string, unknown>) });
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

/** POST/PATCH /admin/v1/orgs/{org_id}/environmental-points[/{point_id}]. */
export async function telemetryAdminHandler(ctx: Ctx, deps: Deps, op: TelemetryAdminOp): Promise<Reply> {
  const org_id = ctx.params.org_id ?? '';
  const point_id = op === 'updatePoint' ? recordId(ctx.params, 'point_id') : '';
  if (!isUuid(org_id)) return json(404, { error: { code: 'not_found', message: 'organisation not found' } });
  await requireKnownOrg(org_id.toLowerCase(), ctx, deps);
  const r = await deps.clients.telemetry().call(op, { org_id: org_id.toLowerCase(), point_id, json: JSON.stringify(objectBody(ctx.body)) }, callerIn(ctx));
  return item(op === 'createPoint' ? 201 : 200, r.json);
}
