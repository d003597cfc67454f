/**
 * The outbound webhook delivery as the OpenAPI 3.1 `webhooks` object: what a
 * subscriber's endpoint receives, and how it verifies the signature under
 * either of a subscription's signature schemes. The same words, with Node.js
 * and Python verification code, are in docs/webhooks.md.
 */
export const WEBHOOK_SIGNATURE_RULES =
  "Every delivery is signed by the subscription's `signature_scheme`. " +
  'With `x-service-signature` (the default): `X-Service-Signature: t=<unix seconds>,v1=<hex>`, where ' +
  '`v1 = hex(HMAC-SHA256(secret, "<t>.<raw body>"))` with the subscription\'s secret. ' +
  'Verify over the raw body bytes before parsing the JSON; parse the header as comma-separated ' +
  'parts (whitespace trimmed, exactly one `t=`, at least one `v1=`, other parts ignored); refuse a ' +
  '`t` more than 300 seconds from your clock; compare in constant time. For 24 hours after a ' +
  'secret rotation a delivery carries two `v1` values (new and old secret): one match suffices. ' +
  'With `standard-webhooks` (the Standard Webhooks specification): `webhook-id` (the delivery id), ' +
  '`webhook-timestamp` (unix seconds) and `webhook-signature: v1,<base64>`, where ' +
  '`v1 = base64(HMAC-SHA256(key, "<webhook-id>.<webhook-timestamp>.<raw body>"))` and the key is the ' +
  'base64-decoded part of the secret `whsec_<base64>`; signatures are space-separated, two during a ' +
  "rotation's overlap; any Standard Webhooks library verifies (`new Webhook(secret).verify(body, headers)`). " +
  'Any 2xx within 10 seconds is success; anything else is retried (5 attempts in all) with the same ' +
  "`X-Service-Delivery` id (and `webhook-id`), which is also the body's `id`.";

const header = (description: string, schema: Record<string, unknown> = { type: 'string' }) => ({ required: true, description, schema });
/** A header only one signature scheme sends. */
const schemeHeader = (scheme: string, description: string, schema: Record<string, unknown> = { type: 'string' }) => ({
  required: false,
  description: `${scheme} only: ${description}`,
  schema,
});

export const WEBHOOKS = {
  event: {
    post: {
      operationId: 'webhookEvent',
      summary: 'An event delivered to a webhook subscription',
      description: WEBHOOK_SIGNATURE_RULES,
      tags: ['management'],
      security: [],
      parameters: [
        { name: 'X-Service-Event', in: 'header', ...header("the event name, also the body's `event`") },
        {
          name: 'X-Service-Delivery',
          in: 'header',
          ...header('the delivery id, the same on every attempt and redelivery', { type: 'string', format: 'uuid' }),
        },
        {
          name: 'X-Service-Signature',
          in: 'header',
          ...schemeHeader('x-service-signature (the default)', '`t=<unix seconds>,v1=<64 hex characters>` (two v1 values during a secret rotation)', {
            type: 'string',
            pattern: '^\\s*t=\\d+\\s*(,\\s*[a-z0-9]+=[^,]*)+$',
          }),
        },
        {
          name: 'webhook-id',
          in: 'header',
          ...schemeHeader('standard-webhooks', 'the delivery id, the same on every attempt and redelivery', { type: 'string', format: 'uuid' }),
        },
        {
          name: 'webhook-timestamp',
          in: 'header',
          ...schemeHeader('standard-webhooks', 'unix seconds of this attempt', { type: 'string', pattern: '^\\d+$' }),
        },
        {
          name: 'webhook-signature',
          in: 'header',
          ...schemeHeader('standard-webhooks', '`v1,<base64 HMAC-SHA256>`, space-separated (two during a secret rotation)', {
            type: 'string',
            pattern: '^v1,[A-Za-z0-9+/]+={0,2}( v1,[A-Za-z0-9+/]+={0,2})*$',
          }),
        },
      ],
      requestBody: {
        required: true,
        content: {
          'application/json': {
            schema: {
              type: 'object',
              required: ['id', 'event', 'org_id', 'delivered_at', 'data'],
              properties: {
                id: { type: 'string', format: 'uuid', description: 'the delivery id' },
                event: { type: 'string', examples: ['sample.created'] },
                org_id: { type: 'string', format: 'uuid' },
                delivered_at: { type: 'string', format: 'date-time', description: 'when this attempt was made' },
                data: { type: 'object', description: "the event's fields (see the events of the specification)" },
              },
            },
          },
        },
      },
      responses: {
        '2XX': { description: 'received; the delivery is done' },
        default: { description: 'not received; the delivery is attempted again' },
      },
    },
  },
};
