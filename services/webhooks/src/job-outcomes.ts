import { EVENT_ROUTES } from '@lab/contracts';
import { sql } from 'drizzle-orm';
import { z } from 'zod';
import { isGuid, type BusMessage, type ServiceDeps } from '@lab/kit';

const uuid = z.string().refine(isGuid, 'must be a UUID');
const created = z.object({ event_id: uuid, job_id: uuid });
const rejected = z.object({ event_id: uuid, reason: z.string().transform((s) => s.slice(0, 2000)) });

/**
 * Records on an inbound event's row what the jobs service made of its job
 * request. Idempotent without an inbox: 'created' (with the job id) replaces
 * 'pending' or an earlier rejection, as a job exists then; 'rejected' (with the
 * reason) replaces only 'pending'. A row that is gone (its endpoint deleted)
 * or an event it cannot read is acknowledged and changes nothing.
 */
async function recordJobOutcome(deps: ServiceDeps, msg: BusMessage): Promise<void> {
  if (!msg.org_id) return;
  if (msg.type === 'inbound_webhook.job_created') {
    const d = created.safeParse(msg.data);
    if (!d.success) {
      warn(deps, msg);
      return;
    }
    await deps.db.orm.execute(
      sql`update webhooks.inbound_events set job_status = 'created', job_id = ${d.data.job_id}::uuid, job_reason = null
          where org_id = ${msg.org_id}::uuid and id = ${d.data.event_id}::uuid and job_status in ('pending', 'rejected')`,
    );
  } else if (msg.type === 'inbound_webhook.job_rejected') {
    const d = rejected.safeParse(msg.data);
    if (!d.success) {
      warn(deps, msg);
      return;
    }
    await deps.db.orm.execute(
      sql`update webhooks.inbound_events set job_status = 'rejected', job_reason = ${d.data.reason}
          where org_id = ${msg.org_id}::uuid and id = ${d.data.event_id}::uuid and job_status = 'pending'`,
    );
  }
}

function warn(deps: ServiceDeps, msg: BusMessage): void {
  deps.log.warn({ id: msg.id, type: msg.type }, 'job outcome without the fields it needs; ignored');
}

export async function consumeJobOutcomes(deps: ServiceDeps): Promise<void> {
  await deps.bus.subscribe({
    ...EVENT_ROUTES.webhookInboundJobOutcomes,
    prefetch: 32,
    handler: (msg) => recordJobOutcome(deps, msg),
  });
}
