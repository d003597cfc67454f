import { z } from 'zod';
import { DomainError, isUuid, systemContext } from '@lab/kit';
import { isInboundAddress } from '@lab/webhooks';
import { json, type Reply } from '../replies.js';
import { callerIn, type Ctx, type Deps } from '../request.js';
import { RateLimitedError } from '../rate-limit.js';
import { parseWith } from '../validation.js';
import { requireKnownOrg } from './known-org.js';

/** Bodies of the webhook management routes; the webhooks service checks their content. */
export const webhooksAdminBodies = {
  createSubscription: z
    .object({ url: z.string().max(2000), events: z.array(z.string().max(200)).min(1).max(50), secret: z.string().max(200).optional() })
    .strict(),
  createInboundEndpoint: z
    .object({
      slug: z.string().max(64).optional(),
      allowed_event_types: z.array(z.string().max(200)).max(100).optional(),
      job_type: z.string().max(100).optional(),
    })
    .strict(),
};

export const webhooksDeliveriesQuery = z.object({ limit: z.coerce.number().int().min(1).max(1000).default(100) }).strict();

function orgParam(ctx: Ctx): string {
  const v = ctx.params.org_id ?? '';
  if (!isUuid(v)) throw DomainError.invalid('org_id must be a UUID', { fields: [{ path: 'org_id', message: 'must be a UUID' }] });
  return v.toLowerCase();
}

export async function webhooksAdminHandler(
  ctx: Ctx,
  deps: Deps,
  action: 'createSubscription' | 'listDeliveries' | 'createInboundEndpoint',
): Promise<Reply> {
  const client = deps.clients.webhooks();
  const caller = callerIn(ctx);
  const org_id = orgParam(ctx);
  await requireKnownOrg(org_id, ctx, deps);
  switch (action) {
    case 'createSubscription': {
      const b = parseWith(webhooksAdminBodies.createSubscription, ctx.body ?? {}, 'invalid request body');
      const s = await client.call('createSubscription', { org_id, ...b }, caller);
      return json(201, { data: { id: s.id, url: s.url, events: s.events, secret: s.secret, active: s.active } });
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
    case 'createInboundEndpoint': {
      const b = parseWith(webhooksAdminBodies.createInboundEndpoint, ctx.body ?? {}, 'invalid request body');
      const e = await client.call('createInboundEndpoint', { org_id, ...b, allowed_event_types: b.allowed_event_types ?? [] }, caller);
      // the receiver's address as this request reached the gateway
      const url = `${ctx.req.protocol}://${ctx.req.get('host') ?? 'localhost'}/functions/v1/inbound-webhook/${org_id}/${e.slug}`;
      return json(201, {
        data: { id: e.id, slug: e.slug, secret: e.secret, url, allowed_event_types: e.allowed_event_types, job_type: e.job_type ?? null },
      });
    }
  }
}

/** Per-endpoint flood limit of the inbound receiver. */
export const INBOUND_LIMITS = { per_minute: 600, per_hour: 36_000 };
/**
 * One budget shared by every request to an address not (yet) known to name an
 * endpoint: made-up paths, and a real endpoint's first request to this process.
 */
export const UNKNOWN_INBOUND_LIMITS = { per_minute: 6000, per_hour: 360_000 };
export const UNKNOWN_INBOUND_KEY = 'inbound:unknown-endpoint';
/** Addresses known to name an endpoint, per gateway (least recently used dropped first). */
export const MAX_KNOWN_ENDPOINTS = 10_000;

/**
 * Answers of the webhooks service that it gives only once it has found the
 * endpoint (signature, body, size, event type, a concurrent duplicate): the
 * address names an endpoint. not_found, unavailable, timeout and internal tell
 * nothing about it.
 */
const FOUND_KINDS = new Set(['invalid', 'unauthenticated', 'too_large', 'unprocessable', 'conflict']);

/**
 * The addresses that named an endpoint when last asked, per gateway (keyed by its
 * limiter, which lives as long as it does), most recently used last.
 */
const knownByGateway = new WeakMap<object, Map<string, true>>();

function knownEndpoints(deps: Deps): Map<string, true> {
  let known = knownByGateway.get(deps.limiter);
  if (!known) {
    known = new Map();
    knownByGateway.set(deps.limiter, known);
  }
  return known;
}

function remember(known: Map<string, true>, address: string): void {
  known.delete(address);
  if (known.size >= MAX_KNOWN_ENDPOINTS) known.delete(known.keys().next().value!);
  known.set(address, true);
}

const header = (ctx: Ctx, name: string): string | undefined => {
  const v = ctx.req.headers[name];
  return Array.isArray(v) ? v.join(', ') : v;
};

/**
 * The inbound receiver: the raw body (at most 1,000,000 bytes, read by
 * express.raw on these routes only) goes unparsed to the webhooks service,
 * which holds the endpoint's secret and verifies the signature before parsing.
 *
 * Flood counters are kept per endpoint, and only for endpoints: the receiver is
 * anonymous, and a counter per well-formed address would let anyone add one (for
 * an hour, in memory or Redis) with each made-up slug. Only the webhooks service
 * knows which addresses name endpoints, so the gateway remembers the ones that
 * did (a bounded set, per process). A known address is counted on its own
 * counter before it is passed on, as always; any other request is counted on one
 * counter shared by all unknown addresses and, if the service then found the
 * endpoint, on the endpoint's counter too (past its limit only from then on: this
 * request was already answered). Made-up paths thus all share one budget; a real
 * endpoint passes through it once per gateway process (or after dropping out of
 * the set), so in a flood of made-up paths its first request may be answered 429
 * and be retried like any other.
 */
export async function inboundWebhookHandler(ctx: Ctx, deps: Deps): Promise<Reply> {
  const slug = ctx.params.slug ?? '';
  const orgId = ctx.params.org_id;
  // a path that cannot name an endpoint is 404 before it is counted at all
  if (!isInboundAddress(orgId, slug)) throw DomainError.notFound('inbound webhook endpoint not found');
  // one endpoint, one counter, however its organisation id is written
  const address = `${orgId?.toLowerCase() ?? '-'}/${slug}`;
  const known = knownEndpoints(deps);
  const wasKnown = known.has(address);
  if (wasKnown) await deps.limiter.consume(`inbound:${address}`, INBOUND_LIMITS, 'other');
  else await deps.limiter.consume(UNKNOWN_INBOUND_KEY, UNKNOWN_INBOUND_LIMITS, 'other');
  const found = async () => {
    remember(known, address);
    if (!wasKnown) {
      // the endpoint's budget counts this request too; it was answered already
      await deps.limiter.consume(`inbound:${address}`, INBOUND_LIMITS, 'other').catch((err: unknown) => {
        if (!(err instanceof RateLimitedError)) throw err;
      });
    }
  };
  const body = Buffer.isBuffer(ctx.body) ? ctx.body : Buffer.alloc(0);
  let r;
  try {
    r = await deps.clients.webhooks().call(
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
  } catch (err) {
    if (err instanceof DomainError && err.kind === 'not_found') known.delete(address);
    else if (err instanceof DomainError && FOUND_KINDS.has(err.kind)) await found();
    throw err;
  }
  await found();
  return json(r.duplicate ? 200 : 202, { event_id: r.event_id, duplicate: r.duplicate });
}
