import { z } from 'zod';
import { DEFAULT_SIGNATURE_SCHEME, FILTER_MESSAGE, SIGNATURE_SCHEMES, SUBSCRIBABLE_FILTERS } from '@lab/webhooks';

/**
 * What a subscription's events may hold: the webhooks service's one list, so the
 * document's enum and the 400's message say what that service accepts.
 */
const subscriptionEvents = z
  .array(z.enum(SUBSCRIBABLE_FILTERS as [string, ...string[]], { error: FILTER_MESSAGE }))
  .min(1)
  .max(50)
  .meta({ description: `exact event names or filters: ${SUBSCRIBABLE_FILTERS.join(', ')}` });

/** How deliveries are signed: the webhooks service's list. */
const signatureScheme = z.enum(SIGNATURE_SCHEMES, { error: `must be one of: ${SIGNATURE_SCHEMES.join(', ')}` }).meta({
  description:
    `how deliveries are signed (default ${DEFAULT_SIGNATURE_SCHEME}): x-service-signature (X-Service-Signature) or standard-webhooks ` +
    '(webhook-id, webhook-timestamp, webhook-signature; the secret is whsec_ and the standard base64 of 24 to 64 bytes)',
});

const allowedEventTypes = z.array(z.string().max(200)).max(100);
const jobType = z.string().max(100);

/** Bodies of the webhook management routes; the webhooks service checks their content. */
export const webhooksAdminBodies = {
  createSubscription: z
    .object({ url: z.string().max(2000), events: subscriptionEvents, secret: z.string().max(200).optional(), signature_scheme: signatureScheme.optional() })
    .strict(),
  updateSubscription: z
    .object({
      url: z.string().max(2000).optional(),
      events: subscriptionEvents.optional(),
      active: z.boolean().optional(),
      signature_scheme: signatureScheme.optional(),
    })
    .strict()
    .refine((b) => b.url !== undefined || b.events !== undefined || b.active !== undefined || b.signature_scheme !== undefined, {
      error: 'nothing to change: give url, events, active or signature_scheme',
      // an unknown key is the problem to name, not also an empty change
      when: (p) => p.issues.length === 0,
    }),
  createInboundEndpoint: z
    .object({ slug: z.string().max(64).optional(), allowed_event_types: allowedEventTypes.optional(), job_type: jobType.optional() })
    .strict(),
  updateInboundEndpoint: z
    .object({ allowed_event_types: allowedEventTypes.optional(), job_type: jobType.nullable().optional(), active: z.boolean().optional() })
    .strict()
    .refine((b) => b.allowed_event_types !== undefined || b.job_type !== undefined || b.active !== undefined, {
      error: 'nothing to change: give allowed_event_types, job_type or active',
      when: (p) => p.issues.length === 0,
    }),
  // the rotation takes no body: the service draws the new secret
  rotateSecret: z.object({}).strict(),
};

export const webhooksDeliveriesQuery = z.object({ limit: z.coerce.number().int().min(1).max(1000).default(100) }).strict();
