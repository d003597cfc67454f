import type { webhooks } from '@lab/contracts';
import { webhooksAdminBodies, webhooksDeliveriesQuery, type WebhooksAdminAction, json, noContent, withLocation, type Reply } from '@lab/http-api';
import { DomainError, isUuid, systemContext, validationFailed } from '@lab/kit';
import { isInboundAddress } from '@lab/webhooks';
import { bucketKey } from '@lab/rate-limits';
import { callerIn, type Ctx, type Deps } from '../request.js';
import { parseBody, parseWith } from '../validation.js';
import { requireKnownOrg } from './known-org.js';
import { adminPage, listEnvelope } from './admin-page.js';

function orgParam(ctx: Ctx): string {
  const v = ctx.params.org_id ?? '';
  if (!isUuid(v)) throw validationFailed([{ path: 'org_id', message: 'must be a UUID' }], 'org_id must be a UUID');
  return v.toLowerCase();
}

/** A subscription without its secret (reads never show it). */
const subscriptionView = (s: webhooks.Subscription) => ({
  id: s.id,
  url: s.url,
  events: s.events,
  active: s.active,
  disabled_reason: s.disabled_reason ?? null,
  created_at: s.created_at,
  updated_at: s.updated_at || s.created_at,
  previous_secret_expires_at: s.previous_secret_expires_at ?? null,
  signature_scheme: s.signature_scheme,
});

/** The receiver's address as this request reached the gateway. */
const receiverUrl = (ctx: Ctx, orgId: string, slug: string) =>
  `${ctx.req.protocol}://${ctx.req.get('host') ?? 'localhost'}/functions/v1/inbound-webhook/${orgId}/${slug}`;

/** An inbound endpoint without its secret (reads never show it). */
const endpointView = (ctx: Ctx, e: webhooks.InboundEndpoint) => ({
  id: e.id,
  slug: e.slug,
  url: receiverUrl(ctx, e.org_id, e.slug),
  allowed_event_types: e.allowed_event_types,
  job_type: e.job_type ?? null,
  active: e.active,
  created_at: e.created_at,
  updated_at: e.updated_at || e.created_at,
  previous_secret_expires_at: e.previous_secret_expires_at ?? null,
});

export async function webhooksAdminHandler(ctx: Ctx, deps: Deps, action: WebhooksAdminAction): Promise<Reply> {
  const client = deps.clients.webhooks();
  const caller = callerIn(ctx);
  const org_id = orgParam(ctx);
  await requireKnownOrg(org_id, ctx, deps);
  const item = { org_id, id: ctx.params.id ?? '' };
  switch (action) {
    case 'createSubscription': {
      const b = parseBody(webhooksAdminBodies.createSubscription, ctx.body, 'invalid request body');
      const s = await client.call('createSubscription', { org_id, ...b }, caller);
      const data = { id: s.id, url: s.url, events: s.events, secret: s.secret, active: s.active, signature_scheme: s.signature_scheme };
      return withLocation(json(201, { data }), ctx.req.path, s.id);
    }
    case 'listSubscriptions': {
      const p = adminPage(ctx);
      const r = await client.call('listSubscriptions', { org_id, ...p }, caller);
      return json(200, listEnvelope(r.subscriptions.map(subscriptionView), r.page, p));
    }
    case 'getSubscription':
      return json(200, { data: subscriptionView(await client.call('getSubscription', item, caller)) });
    case 'updateSubscription': {
      const b = parseBody(webhooksAdminBodies.updateSubscription, ctx.body, 'invalid request body');
      const s = await client.call(
        'updateSubscription',
        { ...item, url: b.url, events: b.events ? { values: b.events } : undefined, active: b.active, signature_scheme: b.signature_scheme },
        caller,
      );
      // a new scheme the old secret cannot sign with drew a new one: shown here, once
      return json(200, { data: s.secret ? { ...subscriptionView(s), secret: s.secret } : subscriptionView(s) });
    }
    case 'deleteSubscription':
      await client.call('deleteSubscription', item, caller);
      return noContent();
    case 'rotateSubscriptionSecret':
    case 'rotateInboundSecret': {
      parseBody(webhooksAdminBodies.rotateSecret, ctx.body, 'invalid request body');
      const r = await client.call(action, item, caller);
      return json(200, { data: { secret: r.secret, previous_secret_expires_at: r.previous_secret_expires_at } });
    }
    case 'listDeliveries': {
      const q = parseWith(webhooksDeliveriesQuery, ctx.req.query, 'invalid query');
      const r = await client.call('listDeliveries', { org_id, subscription_id: ctx.params.id ?? '', limit: q.limit }, caller);
      const data = r.deliveries.map((d) => ({
        id: d.id,
        event: d.event,
        status: d.status,
        attempts: d.attempts,
        last_status_code: d.last_status_code ?? null,
        next_attempt_at: d.next_attempt_at ?? null,
        delivered_at: d.delivered_at ?? null,
        last_error: d.last_error ?? null,
        created_at: d.created_at,
      }));
      return json(200, { data, pagination: { limit: q.limit, offset: 0, total: null } });
    }
    case 'redeliver': {
      const delivery_id = ctx.params.delivery_id ?? '';
      await client.call('redeliver', { org_id, subscription_id: item.id, delivery_id }, caller);
      return json(202, { data: { id: delivery_id.toLowerCase(), status: 'pending' } });
    }
    case 'createInboundEndpoint': {
      const b = parseBody(webhooksAdminBodies.createInboundEndpoint, ctx.body, 'invalid request body');
      const e = await client.call('createInboundEndpoint', { org_id, ...b, allowed_event_types: b.allowed_event_types ?? [] }, caller);
      const data = {
        id: e.id,
        slug: e.slug,
        secret: e.secret,
        url: receiverUrl(ctx, org_id, e.slug),
        allowed_event_types: e.allowed_event_types,
        job_type: e.job_type ?? null,
      };
      return withLocation(json(201, { data }), ctx.req.path, e.id);
    }
    case 'listInboundEndpoints': {
      const p = adminPage(ctx);
      const r = await client.call('listInboundEndpoints', { org_id, ...p }, caller);
      return json(
        200,
        listEnvelope(
          r.endpoints.map((e) => endpointView(ctx, e)),
          r.page,
          p,
        ),
      );
    }
    case 'getInboundEndpoint':
      return json(200, { data: endpointView(ctx, await client.call('getInboundEndpoint', item, caller)) });
    case 'updateInboundEndpoint': {
      const b = parseBody(webhooksAdminBodies.updateInboundEndpoint, ctx.body, 'invalid request body');
      const e = await client.call(
        'updateInboundEndpoint',
        {
          ...item,
          allowed_event_types: b.allowed_event_types ? { values: b.allowed_event_types } : undefined,
          job_type: b.job_type ?? undefined,
          clear_job_type: b.job_type === null,
          active: b.active,
        },
        caller,
      );
      return json(200, { data: endpointView(ctx, e) });
    }
    case 'deleteInboundEndpoint':
      await client.call('deleteInboundEndpoint', item, caller);
      return noContent();
  }
}

/** Per-endpoint flood limit of the inbound receiver. */
export const INBOUND_LIMITS = { per_minute: 600, per_hour: 36_000 };
/**
 * Flood counters are kept per bucket of the endpoint's address (its SHA-256), not
 * per address: the receiver is anonymous, and a counter per well-formed address
 * would let anyone add one (kept up to an hour, in memory or Redis) with each
 * made-up slug. 2^16 buckets bound the counters whatever is sent; a flood of
 * made-up slugs spreads over all of them, so it would need 600 x 2^16 requests a
 * minute to spend a real endpoint's budget. Two endpoints may share a bucket, and
 * so a budget (with 1,000 endpoints, a given one does about one time in 65).
 */
export const INBOUND_BUCKETS = 2 ** 16;
// one endpoint, one counter, however its organisation id is written
export const inboundKey = (orgId: string | undefined, slug: string): string => bucketKey('inbound', `${orgId?.toLowerCase() ?? '-'}/${slug}`, INBOUND_BUCKETS);

const header = (ctx: Ctx, name: string): string | undefined => {
  const v = ctx.req.headers[name];
  return Array.isArray(v) ? v.join(', ') : v;
};

/**
 * The inbound receiver: the raw body (at most 1,000,000 bytes, read by
 * express.raw on these routes only) goes unparsed to the webhooks service,
 * which holds the endpoint's secret and verifies the signature before parsing.
 * Counted per bucket of its address (inboundKey) before it is passed on.
 */
export async function inboundWebhookHandler(ctx: Ctx, deps: Deps): Promise<Reply> {
  const slug = ctx.params.slug ?? '';
  const orgId = ctx.params.org_id;
  // a path that cannot name an endpoint is 404 before it is counted at all
  if (!isInboundAddress(orgId, slug)) throw DomainError.notFound('inbound webhook endpoint not found');
  await deps.limiter.consume(inboundKey(orgId, slug), INBOUND_LIMITS, 'other');
  const body = Buffer.isBuffer(ctx.body) ? ctx.body : Buffer.alloc(0);
  const r = await deps.clients.webhooks().call(
    'receiveInbound',
    {
      org_id: orgId,
      slug,
      body,
      signature: header(ctx, 'x-service-signature'),
      timestamp: header(ctx, 'x-service-timestamp'),
      event_header: header(ctx, 'x-service-event'),
      idempotency_key: header(ctx, 'idempotency-key'),
    },
    { ...systemContext(ctx.requestId, orgId && isUuid(orgId) ? orgId.toLowerCase() : null), token_kind: 'inbound_webhook', scopes: [] },
  );
  return json(r.duplicate ? 200 : 202, { event_id: r.event_id, duplicate: r.duplicate });
}
