/**
 * The outbound webhook delivery as the OpenAPI 3.1 `webhooks` object: what a
 * subscriber's endpoint receives, and how it verifies the signature. The same
 * words, with Node.js and Python verification code, are in docs/webhooks.md.
 */
export const WEBHOOK_SIGNATURE_RULES =
  'Every delivery is signed: `X-Service-Signature: t=<unix seconds>,v1=<hex>`, where ' +
  '`v1 = hex(HMAC-SHA256(secret, "<t>.<raw body>"))` with the subscription\'s secret. ' +
  'Verify over the raw body bytes before parsing the JSON; parse the header as comma-separated ' +
  'parts (whitespace trimmed, exactly one `t=`, at least one `v1=`, other parts ignored); refuse a ' +
  '`t` more than 300 seconds from your clock; compare in constant time. For 24 hours after a ' +
  'secret rotation a delivery carries two `v1` values (new and old secret): one match suffices. ' +
  'Any 2xx within 10 seconds is success; anything else is retried (5 attempts in all) with the same ' +
  "`X-Service-Delivery` id, which is also the body's `id`.";

const header = (description: string, schema: Record<string, unknown> = { type: 'string' }) => ({ required: true, description, schema });

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
          ...header('`t=<unix seconds>,v1=<64 hex characters>` (two v1 values during a secret rotation)', {
            type: 'string',
            pattern: '^\\s*t=\\d+\\s*(,\\s*[a-z0-9]+=[^,]*)+$',
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
