import { EVENT_ROUTES } from '@lab/contracts';
import { z } from 'zod';
import { DomainError, isGuid, systemContext, type BusMessage, type FieldIssue, type ServiceDeps } from '@lab/kit';
import { checkJobRequest, enqueueJob, type CheckedJob } from './api.js';

/** The durable queue of inbound job requests (prefixed with the exchange by the bus). */
export const INBOUND_QUEUE = EVENT_ROUTES.jobsFromInboundWebhooks.queue;

/** What this consumer reads of `inbound_webhook.received`; other fields are ignored. */
const received = z.object({
  event_id: z.string().refine(isGuid, 'must be a UUID'),
  endpoint_id: z.string().refine(isGuid, 'must be a UUID'),
  job_type: z.string().nullish(),
  payload: z.unknown().optional(),
});

/**
 * Why a request made no job, for the inbound event's row: the refusal's code
 * and, for input problems, each field named as the sender wrote it (the
 * payload is the job's input).
 */
function reasonOf(err: DomainError): string {
  const fields = (err.details?.fields as FieldIssue[] | undefined) ?? [];
  const detail = fields.length ? fields.map((f) => `${f.path.replace(/^input\b/, 'payload')}: ${f.message}`).join('; ') : err.message;
  return `${err.code}: ${detail}`.slice(0, 2000);
}

/**
 * One job per inbound webhook event whose endpoint names a job type. The job
 * is a system request of the event's organisation (no user, so its
 * administrators see it; its reads see what an API key without a user sees),
 * the event's payload is its input, and it passes the checks of POST /v1/jobs;
 * administrators' job types are allowed, as the operator configured the
 * endpoint. The outcome goes back to the webhooks service, which owns the
 * event's row: `inbound_webhook.job_created` in the job's own transaction, or
 * `inbound_webhook.job_rejected` when the request can never make a job (job
 * type outside the allowlist, payload that is not valid input), which is
 * acknowledged rather than retried.
 *
 * Redelivery is safe: the job names its inbound event (a unique column), so a
 * second delivery finds the job and emits nothing; a rejection is the same
 * every time, and the webhooks service applies it only to a pending row.
 */
export async function handleInboundEvent(deps: ServiceDeps, msg: BusMessage, maxAttempts: number): Promise<void> {
  const d = received.safeParse(msg.data);
  if (!d.success || !msg.org_id) {
    // no delivery of this message could ever make a job
    deps.log.warn({ id: msg.id, type: msg.type }, 'inbound_webhook.received without the fields a job needs; ignored');
    return;
  }
  const { event_id, endpoint_id, job_type } = d.data;
  if (!job_type) return;
  const org_id = msg.org_id;
  const caller = { ...systemContext(msg.request_id ?? msg.id, org_id), org_id };
  const about = { event_id, endpoint_id, job_type };
  let job: CheckedJob;
  try {
    job = checkJobRequest(caller, job_type, d.data.payload ?? undefined);
  } catch (err) {
    if (!(err instanceof DomainError)) throw err;
    const reason = reasonOf(err);
    deps.log.info({ ...about, reason }, 'inbound webhook event made no job');
    await deps.outbox.write(caller, async (_tx, emit) => emit.event('inbound_webhook.job_rejected', org_id, { ...about, reason }));
    return;
  }
  await enqueueJob(deps, caller, job, maxAttempts, {
    inboundEventId: event_id,
    also: (emit, r) => emit.event('inbound_webhook.job_created', org_id, { ...about, job_id: r.id }),
  });
}

export async function consumeInboundEvents(deps: ServiceDeps, maxAttempts: number): Promise<void> {
  await deps.bus.subscribe({
    ...EVENT_ROUTES.jobsFromInboundWebhooks,
    prefetch: 16,
    handler: (msg) => handleInboundEvent(deps, msg, maxAttempts),
  });
}
