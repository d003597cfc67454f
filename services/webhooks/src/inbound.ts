import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { sql } from 'drizzle-orm';
import { JOB_TYPES, type webhooks } from '@lab/contracts';
import {
  assertOperator,
  assertStorableJson,
  DomainError,
  isForeignKeyViolation,
  isUuid,
  isoTimestamp,
  jsonFromBytes,
  newId,
  parseWith,
  rows,
  type CallerContext,
  type ServiceDeps,
} from '@lab/kit';
import { MANAGING_WEBHOOKS, generateSecret } from './management.js';
import { ENDPOINT_COLUMNS, toEndpoint, type EndpointViewRow } from './endpoint-view.js';
import { verifySignature } from './signature.js';

const SLUG = /^[a-z0-9][a-z0-9_-]{0,63}$/;
/** The largest accepted `payload`, serialised (description B: 256 KB). */
const MAX_PAYLOAD_BYTES = 256 * 1024;

/** What an endpoint's allowed_event_types and job_type may hold (creation and change alike). */
export const allowedEventTypes = z.array(z.string().regex(/^[A-Za-z0-9_.:-]{1,200}$/, 'letters, digits and _ . : - only')).max(100);
// administrators' export types included: the operator creates endpoints
export const endpointJobType = z.enum(JOB_TYPES, { error: `must be one of the allowlisted job types: ${JOB_TYPES.join(', ')}` });

const createEndpoint = z.object({
  org_id: z.string().refine(isUuid, 'must be a UUID'),
  slug: z.string().regex(SLUG, 'lower-case letters, digits, - and _, at most 64, starting with a letter or digit').optional(),
  allowed_event_types: allowedEventTypes,
  job_type: endpointJobType.optional(),
});

/** Random slugs: 24 hex characters, unique across organisations (partial unique index). */
const generateSlug = () => randomBytes(12).toString('hex');

export async function createInboundEndpoint(
  deps: ServiceDeps,
  caller: CallerContext,
  req: webhooks.CreateInboundEndpointRequest,
): Promise<webhooks.InboundEndpoint> {
  assertOperator(caller, MANAGING_WEBHOOKS);
  const b = parseWith(createEndpoint, req);
  const allowed = [...new Set(b.allowed_event_types)];
  const secret = generateSecret();
  // a generated slug colliding (never in practice) is simply drawn again
  for (let attempt = 0; attempt < 3; attempt++) {
    const id = newId();
    const slug = b.slug ?? generateSlug();
    const created = await deps.outbox.write(caller, async (tx, emit) => {
      const r = await rows<EndpointViewRow>(
        tx,
        sql`insert into webhooks.inbound_endpoints (id, org_id, slug, slug_generated, secret, allowed_event_types, job_type)
            values (${id}::uuid, ${b.org_id}::uuid, ${slug}, ${b.slug === undefined}, ${secret},
                    string_to_array(${allowed.join(',')}, ','), ${b.job_type ?? null})
            on conflict do nothing returning ${ENDPOINT_COLUMNS}`,
      );
      if (!r.length) return undefined;
      emit.audit(b.org_id, {
        action: 'create',
        resource: 'inbound_endpoint',
        record_id: id,
        after: { id, slug, allowed_event_types: allowed, job_type: b.job_type ?? null },
      });
      return r[0];
    });
    // the creation answer is the one place the secret is shown
    if (created) return { ...toEndpoint(created), secret };
    if (b.slug !== undefined) throw DomainError.conflict(`the slug ${b.slug} is already used in this organisation`, 'slug_taken');
  }
  throw DomainError.unavailable('could not allocate a unique slug, try again');
}

interface EndpointRow {
  id: string;
  org_id: string;
  secret: string;
  /** the secret a rotation replaced, while it is still accepted (24 hours) */
  previous_secret: string | null;
  allowed_event_types: string[];
  job_type: string | null;
}

const notFound = () => DomainError.notFound('inbound webhook endpoint not found');

/**
 * Whether a receiver path can name an endpoint at all (a slug as endpoints have
 * them, an organisation id that is a UUID). The gateway asks before it counts the
 * request against the endpoint's flood limit, so made-up paths create no counters.
 */
export const isInboundAddress = (orgId: string | undefined, slug: string): boolean => SLUG.test(slug) && (orgId === undefined || isUuid(orgId));

/**
 * The active endpoint a request names. The long path names the organisation;
 * the short path finds a slug only when exactly one active endpoint has it
 * (generated slugs are unique everywhere; a chosen slug may repeat across
 * organisations, and then the short path is ambiguous: 404).
 */
async function findEndpoint(deps: ServiceDeps, orgId: string | undefined, slug: string): Promise<EndpointRow> {
  if (!isInboundAddress(orgId, slug)) throw notFound();
  const cols = sql`id::text, org_id::text, secret, allowed_event_types, job_type,
                   case when previous_secret_expires_at > now() then previous_secret end as previous_secret`;
  if (orgId !== undefined) {
    const [e] = await deps.db.rows<EndpointRow>(
      sql`select ${cols} from webhooks.inbound_endpoints where org_id = ${orgId}::uuid and slug = ${slug} and active`,
    );
    if (!e) throw notFound();
    return e;
  }
  // a lookup across organisations by design: the short path carries no org
  const found = await deps.db.rows<EndpointRow>(sql`select ${cols} from webhooks.inbound_endpoints where slug = ${slug} and active limit 2`);
  if (found.length !== 1) throw notFound();
  return found[0]!;
}

const iso = isoTimestamp();
const inboundBody = z.object({
  event_type: z.string().min(1).max(200).optional(),
  event: z.string().min(1).max(200).optional(),
  occurred_at: iso.optional(),
  external_id: z.string().min(1).max(200).optional(),
  payload: z.unknown().optional(),
});

const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,200}$/;

/**
 * Receives one inbound event: endpoint (404), signature over the raw bytes
 * before any parsing (400 malformed header, 401 mismatch or stale), then the
 * body (400), payload size (413), allowed event type (422), and storage, where
 * a repeated external_id or Idempotency-Key of the endpoint answers the stored
 * event with duplicate: true and changes nothing.
 */
export async function receiveInbound(deps: ServiceDeps, caller: CallerContext, req: webhooks.ReceiveInboundRequest): Promise<webhooks.ReceiveInboundResponse> {
  const ep = await findEndpoint(deps, req.org_id, req.slug);
  verifySignature({
    secret: ep.previous_secret ? [ep.secret, ep.previous_secret] : ep.secret,
    body: req.body,
    signature: req.signature,
    timestamp: req.timestamp,
  });

  // the one JSON reader of every route (kit): bytes that are not UTF-8 are 400 naming the first, never replaced
  const parsed = jsonFromBytes(req.body);
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw DomainError.invalid('body must be a JSON object', { field: '', fields: [{ path: '', message: 'must be a JSON object' }] });
  }
  // deeper JSON would overflow the stack when walked or serialised again (a 500,
  // retried by the sender in vain); NUL and unpaired surrogates cannot be stored
  assertStorableJson(parsed);
  const b = parseWith(inboundBody, parsed);
  const eventType = b.event_type ?? b.event ?? req.event_header?.trim();
  if (!eventType || eventType.length > 200) {
    throw DomainError.invalid('event_type is required (body event_type or event, or header X-Service-Event)', {
      field: 'event_type',
      fields: [{ path: 'event_type', message: 'is required' }],
    });
  }
  const payloadJson = b.payload === undefined ? null : JSON.stringify(b.payload);
  if (payloadJson !== null && Buffer.byteLength(payloadJson) > MAX_PAYLOAD_BYTES) {
    throw new DomainError('too_large', 'payload_too_large', `payload exceeds ${MAX_PAYLOAD_BYTES} bytes`);
  }
  if (ep.allowed_event_types.length && !ep.allowed_event_types.includes(eventType)) {
    throw DomainError.unprocessable(`event type ${eventType} is not allowed on this endpoint`, 'event_type_not_allowed', {
      event_type: eventType,
    });
  }
  const key = req.idempotency_key?.trim() || undefined;
  if (key !== undefined && !IDEMPOTENCY_KEY.test(key)) {
    throw DomainError.invalid('Idempotency-Key must be 1 to 200 visible ASCII characters', { header: 'Idempotency-Key' }, 'invalid_idempotency_key');
  }

  const id = newId();
  try {
    return await deps.outbox.write(caller, async (tx, emit) => {
      const inserted = await rows<{ id: string }>(
        tx,
        sql`insert into webhooks.inbound_events
              (id, org_id, endpoint_id, event_type, occurred_at, external_id, idempotency_key, payload, job_type, job_status)
            values (${id}::uuid, ${ep.org_id}::uuid, ${ep.id}::uuid, ${eventType}, ${b.occurred_at ?? null}::timestamptz,
                    ${b.external_id ?? null}, ${key ?? null}, ${payloadJson}::jsonb, ${ep.job_type},
                    ${ep.job_type ? 'pending' : null})
            on conflict do nothing returning id::text`,
      );
      if (!inserted.length) {
        const [orig] = await rows<{ id: string }>(
          tx,
          sql`select id::text from webhooks.inbound_events
              where org_id = ${ep.org_id}::uuid and endpoint_id = ${ep.id}::uuid
                and (external_id = ${b.external_id ?? null} or idempotency_key = ${key ?? null})
              order by received_at limit 1`,
        );
        if (!orig) throw DomainError.conflict('a concurrent duplicate is being stored, retry', 'inbound_conflict');
        return { event_id: orig.id, duplicate: true };
      }
      // The jobs service makes the job from this event, the payload being its
      // input: carried along (at most 256 KiB) so that the jobs service needs no
      // call back here, and only with a job type, so other events stay small.
      emit.event('inbound_webhook.received', ep.org_id, {
        event_id: id,
        endpoint_id: ep.id,
        event_type: eventType,
        external_id: b.external_id ?? null,
        occurred_at: b.occurred_at ?? null,
        job_type: ep.job_type,
        ...(ep.job_type ? { payload: b.payload ?? null } : {}),
      });
      emit.audit(ep.org_id, {
        action: 'create',
        resource: 'inbound_event',
        record_id: id,
        after: { id, endpoint_id: ep.id, event_type: eventType, external_id: b.external_id ?? null, job_type: ep.job_type },
      });
      return { event_id: id, duplicate: false };
    });
  } catch (err) {
    // the endpoint deleted after it was found: its events' foreign key fails, and
    // the request is answered as for any endpoint that is not there
    throw isForeignKeyViolation(err) ? notFound() : err;
  }
}
