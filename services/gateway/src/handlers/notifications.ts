import { messageJson, NOTIFICATION_SHAPE, type notifications, type RecordObject } from '@lab/contracts';
import { callerIn, type Ctx, type Deps } from '../request.js';
import { objectBody, queryMap, recordId } from './records.js';
import { itemFromJson, json, JSON_TYPE, type Reply } from '@lab/http-api';

/** A notification as its owner has always read it (timestamps as PostgreSQL writes them). */
const notificationJson = (n: notifications.Notification): string => messageJson(NOTIFICATION_SHAPE, n as unknown as RecordObject);

/** POST /v1/notifications: 201 {data: {created, notification_ids}}. */
export async function createNotifications(ctx: Ctx, deps: Deps): Promise<Reply> {
  const r = await deps.clients.notifications().call('createNotifications', { body: objectBody(ctx.body) }, callerIn(ctx));
  return json(201, { data: { created: r.created, notification_ids: r.notification_ids } });
}

/**
 * GET /v1/notifications: {data, count} plus the pagination object of the list
 * envelope; when more notifications exist than were returned, a Warning says the
 * result was capped.
 */
export async function listNotifications(ctx: Ctx, deps: Deps): Promise<Reply> {
  const query = queryMap(ctx.req.query);
  const r = await deps.clients.notifications().call('listNotifications', { query }, callerIn(ctx));
  const capped = r.total > r.offset + r.count;
  return {
    status: 200,
    body: `{"data":[${r.notifications.map(notificationJson).join(',')}],"count":${r.count},"pagination":${JSON.stringify({ limit: r.limit, offset: r.offset, total: r.total })}}`,
    contentType: JSON_TYPE,
    headers: capped ? { Warning: `299 - "results capped at ${r.limit}"` } : undefined,
  };
}

/** PATCH /v1/notifications/{id} {read}: the owner marks it read or unread. */
export async function updateNotification(ctx: Ctx, deps: Deps): Promise<Reply> {
  const id = recordId(ctx.params);
  const r = await deps.clients.notifications().call('updateNotification', { id, body: objectBody(ctx.body) }, callerIn(ctx));
  return itemFromJson(200, notificationJson(r.notification!));
}
