import { z } from 'zod';
import { sql } from 'drizzle-orm';
import type { webhooks } from '@lab/contracts';
import {
  assertOperator,
  DomainError,
  hasControlCharacters,
  isUuid,
  lockKey,
  newId,
  parseWith,
  rows,
  storableText,
  type CallerContext,
  type ServiceDeps,
} from '@lab/kit';
import { iso } from './admin-common.js';
import { FILTER_MESSAGE, isValidFilter } from './event-filters.js';
import { DEFAULT_SIGNATURE_SCHEME, generateSecretFor, SIGNATURE_SCHEMES, secretProblem } from './signature-schemes.js';
import { SUBSCRIPTION_COLUMNS, toSubscription, type SubscriptionRow } from './subscription-view.js';

/** What the management RPCs (reached through the operator token) name when they refuse another caller. */
export const MANAGING_WEBHOOKS = 'managing webhooks';

const orgId = z.string().refine(isUuid, 'must be a UUID');
const secret = z
  .string()
  .min(16, 'must be at least 16 characters')
  .max(200)
  .regex(/^[\x21-\x7e]+$/, 'visible ASCII only');

export const MAX_SUBSCRIPTIONS_PER_ORG = 100;

/**
 * A receiver's URL as stored: http(s), no credentials, nothing the parser would
 * rewrite (no control characters, which it would encode or drop: the stored URL
 * must be the one given), and by kit's storableText one PostgreSQL can hold.
 */
export const subscriptionUrl = z
  .string()
  .max(2000)
  .refine((u) => !hasControlCharacters(u) && storableText(u), 'must not contain control characters or unpaired surrogates')
  .refine((u) => URL.canParse(u) && ['http:', 'https:'].includes(new URL(u).protocol) && !new URL(u).username && !new URL(u).password, {
    error: 'must be an http(s) URL without credentials',
  });

/** A subscription's events: names and filters of the one list (event-filters.ts). */
export const subscriptionEvents = z.array(z.string().max(200).refine(isValidFilter, FILTER_MESSAGE)).min(1).max(50);

/** How a subscription's deliveries are signed (signature-schemes.ts). */
export const signatureScheme = z.enum(SIGNATURE_SCHEMES, { error: `must be one of: ${SIGNATURE_SCHEMES.join(', ')}` });

export const createSubscriptionBody = z
  .object({
    org_id: orgId,
    url: subscriptionUrl,
    events: subscriptionEvents,
    secret: secret.optional(),
    signature_scheme: signatureScheme.default(DEFAULT_SIGNATURE_SCHEME),
  })
  .superRefine((b, ctx) => {
    const problem = b.secret === undefined ? undefined : secretProblem(b.signature_scheme, b.secret);
    if (problem) ctx.addIssue({ code: 'custom', path: ['secret'], message: problem });
  });

/** Generated signing secrets of inbound endpoints (and of the default scheme): prefixed so they are recognisable in a leak scan. */
export const generateSecret = () => generateSecretFor(DEFAULT_SIGNATURE_SCHEME);

export async function createSubscription(deps: ServiceDeps, caller: CallerContext, req: webhooks.CreateSubscriptionRequest): Promise<webhooks.Subscription> {
  assertOperator(caller, MANAGING_WEBHOOKS);
  const b = parseWith(createSubscriptionBody, req);
  const events = [...new Set(b.events)];
  const id = newId();
  const secretOf = b.secret ?? generateSecretFor(b.signature_scheme);
  const row = await deps.outbox.write(caller, async (tx, emit) => {
    // creates for one organisation take turns: two at the limit cannot both count below it
    await lockKey(tx, `webhooks.subscriptions.${b.org_id.toLowerCase()}`);
    const [{ n }] = (await rows<{ n: number }>(tx, sql`select count(*)::int as n from webhooks.subscriptions where org_id = ${b.org_id}::uuid`)) as [
      { n: number },
    ];
    if (n >= MAX_SUBSCRIPTIONS_PER_ORG) {
      throw DomainError.conflict(`an organisation has at most ${MAX_SUBSCRIPTIONS_PER_ORG} subscriptions`, 'too_many_subscriptions');
    }
    const [r] = await rows<SubscriptionRow>(
      tx,
      sql`insert into webhooks.subscriptions (id, org_id, url, events, secret, signature_scheme)
          values (${id}::uuid, ${b.org_id}::uuid, ${b.url}, string_to_array(${events.join(',')}, ','), ${secretOf}, ${b.signature_scheme})
          returning ${SUBSCRIPTION_COLUMNS}`,
    );
    // the secret never goes into the audit log
    emit.audit(b.org_id, {
      action: 'create',
      resource: 'webhook_subscription',
      record_id: id,
      after: { id, url: b.url, events, active: true, signature_scheme: b.signature_scheme },
    });
    return r!;
  });
  // the creation answer is the one place the secret is shown
  return { ...toSubscription(row), secret: secretOf };
}

const listDeliveriesBody = z.object({
  org_id: orgId,
  subscription_id: z.string(),
  limit: z.number().int().min(0).max(1000),
});

interface DeliveryRow {
  id: string;
  event: string;
  status: string;
  attempts: number;
  last_status_code: number | null;
  next_attempt_at: string | null;
  delivered_at: string | null;
  last_error: string | null;
  created_at: string;
}

/** The newest deliveries of a subscription (default 100, at most 1000). */
export async function listSubscriptionDeliveries(
  deps: ServiceDeps,
  caller: CallerContext,
  req: webhooks.ListDeliveriesRequest,
): Promise<webhooks.ListDeliveriesResponse> {
  assertOperator(caller, MANAGING_WEBHOOKS);
  const b = parseWith(listDeliveriesBody, req);
  if (!isUuid(b.subscription_id)) throw DomainError.notFound('webhook subscription not found');
  const sub = await deps.db.rows<{ id: string }>(
    sql`select id from webhooks.subscriptions where org_id = ${b.org_id}::uuid and id = ${b.subscription_id}::uuid`,
  );
  if (!sub.length) throw DomainError.notFound('webhook subscription not found');
  const list = await deps.db.rows<DeliveryRow>(
    sql`select id::text, event, status, attempts, last_status_code, last_error,
               case when status = 'pending' then ${iso('next_attempt_at')} end as next_attempt_at,
               ${iso('delivered_at')} as delivered_at, ${iso('created_at')} as created_at
        from webhooks.deliveries
        where org_id = ${b.org_id}::uuid and subscription_id = ${b.subscription_id}::uuid
        order by created_at desc, id desc limit ${b.limit || 100}`,
  );
  return {
    deliveries: list.map((d) => ({
      ...d,
      last_status_code: d.last_status_code ?? undefined,
      next_attempt_at: d.next_attempt_at ?? undefined,
      delivered_at: d.delivered_at ?? undefined,
      last_error: d.last_error ?? undefined,
    })),
  };
}
