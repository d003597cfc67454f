import { z } from 'zod';
import { sql } from 'drizzle-orm';
import type { webhooks } from '@lab/contracts';
import { assertOperator, DomainError, isUuid, parseWith, rows, type CallerContext, type ServiceDeps } from '@lab/kit';
import { pageOf, parseItem, parsePage, rotateSecret } from './admin-common.js';
import { MANAGING_WEBHOOKS, signatureScheme, subscriptionUrl, subscriptionEvents } from './management.js';
import { generateSecretFor, secretProblem } from './signature-schemes.js';
import { SUBSCRIPTION_COLUMNS, toSubscription, type SubscriptionRow } from './subscription-view.js';

/**
 * Reading and undoing subscriptions (operator token). No read shows a secret:
 * only the rotation's answer carries the new one, once.
 */
const notFound = () => DomainError.notFound('webhook subscription not found');
const TABLE = sql`webhooks.subscriptions`;

/** An audit view of a subscription: never a secret. */
const snapshot = (r: SubscriptionRow) => ({
  id: r.id,
  url: r.url,
  events: r.events,
  active: r.active,
  disabled_reason: r.disabled_reason,
  signature_scheme: r.signature_scheme,
});

export async function listSubscriptions(deps: ServiceDeps, caller: CallerContext, req: webhooks.PageRequest): Promise<webhooks.ListSubscriptionsResponse> {
  assertOperator(caller, MANAGING_WEBHOOKS);
  const r = await pageOf<SubscriptionRow>(deps.db.orm, TABLE, SUBSCRIPTION_COLUMNS, parsePage(req));
  return { subscriptions: r.rows.map(toSubscription), page: r.page };
}

export async function getSubscription(deps: ServiceDeps, caller: CallerContext, req: webhooks.ItemRequest): Promise<webhooks.Subscription> {
  assertOperator(caller, MANAGING_WEBHOOKS);
  const { org_id, id } = parseItem(req, 'webhook subscription');
  const [row] = await deps.db.rows<SubscriptionRow>(sql`select ${SUBSCRIPTION_COLUMNS} from ${TABLE} where org_id = ${org_id}::uuid and id = ${id}::uuid`);
  if (!row) throw notFound();
  return toSubscription(row);
}

const updateBody = z
  .object({
    url: subscriptionUrl.optional(),
    events: z.object({ values: subscriptionEvents }).optional(),
    active: z.boolean().optional(),
    signature_scheme: signatureScheme.optional(),
  })
  .refine(
    (b) => b.url !== undefined || b.events !== undefined || b.active !== undefined || b.signature_scheme !== undefined,
    'nothing to change: give url, events, active or signature_scheme',
  );

/**
 * Changes url, events, active or signature_scheme. Turning a subscription on
 * clears what the auto-disable rule wrote; a new url moves its pending
 * deliveries to the new receiver's host (the per-host limit counts by it).
 * A new signature scheme ends a rotation's overlap (the receiver changes its
 * verification and verifies with the current secret); when the current secret
 * cannot sign with the new scheme (a Standard Webhooks key is base64 bytes) a
 * new one is drawn and the answer shows it, once, as a creation does.
 */
export async function updateSubscription(deps: ServiceDeps, caller: CallerContext, req: webhooks.UpdateSubscriptionRequest): Promise<webhooks.Subscription> {
  assertOperator(caller, MANAGING_WEBHOOKS);
  const { org_id, id } = parseItem(req, 'webhook subscription');
  const b = parseWith(updateBody, { url: req.url, events: req.events, active: req.active, signature_scheme: req.signature_scheme });
  const events = b.events ? [...new Set(b.events.values)] : undefined;
  return deps.outbox.write(caller, async (tx, emit) => {
    const [before] = await rows<SubscriptionRow>(
      tx,
      sql`select ${SUBSCRIPTION_COLUMNS} from ${TABLE} where org_id = ${org_id}::uuid and id = ${id}::uuid for update`,
    );
    if (!before) throw notFound();
    const sets = [sql`updated_at = now()`];
    if (b.url !== undefined) sets.push(sql`url = ${b.url}`);
    if (events) sets.push(sql`events = string_to_array(${events.join(',')}, ',')`);
    if (b.active === true) sets.push(sql`active = true, disabled_reason = null, disabled_at = null`);
    if (b.active === false) sets.push(sql`active = false, disabled_reason = null, disabled_at = now()`);
    let drawn: string | undefined;
    if (b.signature_scheme !== undefined && b.signature_scheme !== before.signature_scheme) {
      sets.push(sql`signature_scheme = ${b.signature_scheme}, previous_secret = null, previous_secret_expires_at = null`);
      const [{ secret }] = (await rows<{ secret: string }>(tx, sql`select secret from ${TABLE} where org_id = ${org_id}::uuid and id = ${id}::uuid`)) as [
        { secret: string },
      ];
      if (secretProblem(b.signature_scheme, secret)) {
        drawn = generateSecretFor(b.signature_scheme);
        sets.push(sql`secret = ${drawn}`);
      }
    }
    const [after] = await rows<SubscriptionRow>(
      tx,
      sql`update ${TABLE} set ${sql.join(sets, sql`, `)} where org_id = ${org_id}::uuid and id = ${id}::uuid returning ${SUBSCRIPTION_COLUMNS}`,
    );
    if (b.url !== undefined && b.url !== before.url) {
      await tx.execute(sql`update webhooks.deliveries set host = ${new URL(b.url).host}
                           where org_id = ${org_id}::uuid and subscription_id = ${id}::uuid and status = 'pending'`);
    }
    // the audit entry says a secret was drawn, never which
    emit.audit(org_id, {
      action: 'update',
      resource: 'webhook_subscription',
      record_id: id,
      before: snapshot(before),
      after: { ...snapshot(after!), ...(drawn ? { secret_replaced: true } : {}) },
    });
    return { ...toSubscription(after!), secret: drawn ?? '' };
  });
}

/** Deletes a subscription and its delivery log (foreign key cascade); nothing more is sent to it. */
export async function deleteSubscription(deps: ServiceDeps, caller: CallerContext, req: webhooks.ItemRequest): Promise<webhooks.Empty> {
  assertOperator(caller, MANAGING_WEBHOOKS);
  const { org_id, id } = parseItem(req, 'webhook subscription');
  await deps.outbox.write(caller, async (tx, emit) => {
    const [gone] = await rows<SubscriptionRow>(
      tx,
      sql`delete from ${TABLE} where org_id = ${org_id}::uuid and id = ${id}::uuid returning ${SUBSCRIPTION_COLUMNS}`,
    );
    if (!gone) throw notFound();
    emit.audit(org_id, { action: 'delete', resource: 'webhook_subscription', record_id: id, before: snapshot(gone) });
  });
  return {};
}

/**
 * A new generated secret, of the form the subscription's signature scheme
 * needs, signs from now on; the replaced one signs beside it for 24 hours.
 */
export async function rotateSubscriptionSecret(deps: ServiceDeps, caller: CallerContext, req: webhooks.ItemRequest): Promise<webhooks.RotatedSecret> {
  assertOperator(caller, MANAGING_WEBHOOKS);
  const { org_id, id } = parseItem(req, 'webhook subscription');
  const secret = sql`case when signature_scheme = 'standard-webhooks' then ${generateSecretFor('standard-webhooks')}
                          else ${generateSecretFor('x-service-signature')} end`;
  return rotateSecret(deps, caller, { table: TABLE, resource: 'webhook_subscription', org_id, id, notFound }, secret);
}

/**
 * Schedules a delivered or failed delivery again, at once and with a fresh
 * attempt budget: the same row, so the receiver sees the same delivery id (the
 * envelope's id and X-Service-Delivery) and the same event. A delivery still
 * pending is already scheduled (or in flight): 409 delivery_pending, since
 * moving it forward could send it twice at once.
 */
export async function redeliver(deps: ServiceDeps, caller: CallerContext, req: webhooks.RedeliverRequest): Promise<webhooks.Empty> {
  assertOperator(caller, MANAGING_WEBHOOKS);
  const { org_id, id: subscriptionId } = parseItem({ org_id: req.org_id, id: req.subscription_id }, 'webhook subscription');
  if (!isUuid(req.delivery_id)) throw DomainError.notFound('delivery not found');
  const deliveryId = req.delivery_id.toLowerCase();
  await deps.outbox.write(caller, async (tx, emit) => {
    const [d] = await rows<{ status: string; event: string }>(
      tx,
      sql`select status, event from webhooks.deliveries
          where org_id = ${org_id}::uuid and subscription_id = ${subscriptionId}::uuid and id = ${deliveryId}::uuid for update`,
    );
    if (!d) throw DomainError.notFound('delivery not found');
    if (d.status === 'pending') throw DomainError.conflict('the delivery is already scheduled; it is sent without being asked', 'delivery_pending');
    await tx.execute(sql`update webhooks.deliveries
        set status = 'pending', attempts = 0, next_attempt_at = now(), delivered_at = null, failed_at = null
        where org_id = ${org_id}::uuid and subscription_id = ${subscriptionId}::uuid and id = ${deliveryId}::uuid`);
    emit.audit(org_id, {
      action: 'redeliver',
      resource: 'webhook_delivery',
      record_id: deliveryId,
      before: { status: d.status },
      after: { status: 'pending', subscription_id: subscriptionId, event: d.event },
    });
  });
  return {};
}
