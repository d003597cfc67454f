import { EVENT_ROUTES } from '@lab/contracts';
import { z } from 'zod';
import { DomainError, isGuid, systemContext, type BusMessage, type FieldIssue, type ServiceDeps } from '@lab/kit';
import { checkJobRequest, enqueueJob, type CheckedJob } from './api.js';
import { INPUTS, isJobType, type JobType } from './job-types.js';

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
 * Why a request made no job, or a dead one: the refusal's code and, for input
 * problems, each field named as the sender wrote it (payload.<field>).
 */
function reasonOf(err: DomainError): string {
  const fields = (err.details?.fields as FieldIssue[] | undefined) ?? [];
  const detail = fields.length ? fields.map((f) => `${f.path.replace(/^input\b/, 'payload')}: ${f.message}`).join('; ') : err.message;
  return `${err.code}: ${detail}`.slice(0, 2000);
}

/**
 * The job's input out of an event's payload: the fields the job type defines,
 * taken where the sender put them; everything else the sender sent (an order
 * number, a LIMS reference) is not an error, it stays in the job's context.
 */
function inputFromPayload(jobType: JobType, payload: unknown): Record<string, unknown> {
  if (payload === null || typeof payload !== 'object' || Array.isArray(payload)) return {};
  const known = Object.keys(INPUTS[jobType].shape);
  return Object.fromEntries(Object.entries(payload).filter(([k]) => known.includes(k)));
}

/**
 * One job per inbound webhook event whose endpoint names a job type. The job
 * is a system request of the event's organisation (no user, so its
 * administrators see it; its reads see what an API key without a user sees);
 * its input is the payload's fields its type defines, and the whole payload is
 * its context (GET /v1/jobs shows both, with the event's id); administrators'
 * job types are allowed, as the operator configured the endpoint.
 *
 * An event whose fields cannot make a runnable input (a PDF of an entry without
 * entry_id) still gets its job, dead at once with the reason: visible through
 * the API beside the payload, never dropped and never retried. Only a job type
 * outside the allowlist makes no job (`inbound_webhook.job_rejected` with the
 * reason). The outcome goes back to the webhooks service, which owns the
 * event's row: `inbound_webhook.job_created` in the job's own transaction.
 *
 * Redelivery is safe: the job names its inbound event (a unique column), so a
 * second delivery finds the job and emits nothing; a rejection is the same
 * every time, and the webhooks service applies it only to a pending row.
 */
async function handleInboundEvent(deps: ServiceDeps, msg: BusMessage, maxAttempts: number): Promise<void> {
  const d = received.safeParse(msg.data);
  if (!d.success || !msg.org_id) {
    // no delivery of this message could ever make a job
    deps.log.warn({ id: msg.id, type: msg.type }, 'inbound_webhook.received without the fields a job needs; ignored');
    return;
  }
  const { event_id, endpoint_id, job_type, payload } = d.data;
  if (!job_type) return;
  const org_id = msg.org_id;
  const caller = { ...systemContext(msg.request_id ?? msg.id, org_id), org_id };
  const about = { event_id, endpoint_id, job_type };
  if (!isJobType(job_type)) {
    const reason = reasonOf(checkFailure(() => checkJobRequest(caller, job_type, {}))!);
    deps.log.info({ ...about, reason }, 'inbound webhook event made no job');
    await deps.outbox.write(caller, async (_tx, emit) => emit.event('inbound_webhook.job_rejected', org_id, { ...about, reason }));
    return;
  }
  const input = inputFromPayload(job_type, payload);
  let job: CheckedJob = { job_type, input };
  let deadWith: string | undefined;
  const refused = checkFailure(() => (job = checkJobRequest(caller, job_type, input)));
  if (refused) {
    deadWith = reasonOf(refused);
    deps.log.info({ ...about, reason: deadWith }, 'inbound webhook event made a job that cannot run');
  }
  await enqueueJob(deps, caller, job, maxAttempts, {
    inboundEventId: event_id,
    context: payload ?? null,
    deadWith,
    also: (emit, r) => emit.event('inbound_webhook.job_created', org_id, { ...about, job_id: r.id }),
  });
}

/** The DomainError a check throws, or undefined when it passes. */
function checkFailure(check: () => unknown): DomainError | undefined {
  try {
    check();
    return undefined;
  } catch (err) {
    if (err instanceof DomainError) return err;
    throw err;
  }
}

export async function consumeInboundEvents(deps: ServiceDeps, maxAttempts: number): Promise<void> {
  await deps.bus.subscribe({
    ...EVENT_ROUTES.jobsFromInboundWebhooks,
    prefetch: 16,
    handler: (msg) => handleInboundEvent(deps, msg, maxAttempts),
  });
}
