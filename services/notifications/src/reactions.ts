import { EVENT_ROUTES } from '@lab/contracts';
import { z } from 'zod';
import { consumeWithInbox, Emitter, systemContext, type BusMessage, type ServiceDeps } from '@lab/kit';
import { alertedRecently, claimAlert } from './breach-alerts.js';
import type { NotificationsSettings } from './settings.js';
import { insertNotifications, type NotificationContent } from './store.js';
import { resolveMembers, type IdentityPeer, type Targets } from './targets.js';

/**
 * Notifications the service creates by itself, from events of other services.
 * Each consumer owns the shape of the events it reads (tolerant: extra fields
 * are ignored, a message it cannot read notifies nobody).
 *
 * - `environmental.breach`: every `qm` member of the event's organisation, once
 *   per point in each quiet period (breach-alerts.ts).
 * - `job.updated` with a terminal status (succeeded, dead): the job's creator,
 *   if a user created it and is still a member. `failed` is not terminal: the
 *   job is retried until it succeeds or is dead.
 */
const breach = z.object({
  parameter: z.string().optional(),
  external_code: z.string().nullish(),
  point_id: z.string().nullish(),
  value: z.number().nullish(),
  unit: z.string().nullish(),
  limit_min: z.number().nullish(),
  limit_max: z.number().nullish(),
  measured_at: z.string().nullish(),
});

const jobUpdated = z.object({
  created_by: z.string().nullish(),
  job: z.object({
    id: z.string(),
    job_type: z.string(),
    status: z.string(),
    status_text: z.string().nullish(),
    error_message: z.string().nullish(),
  }),
});

const TERMINAL = new Set(['succeeded', 'dead']);

interface Plan {
  targets: Targets;
  content: NotificationContent;
  /** the monitored point whose alert this is, when alerts of it are throttled */
  point_key?: string;
}

const clip = (s: string, n: number) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);

/** What one event asks for, or undefined when it notifies nobody. */
export function planFor(msg: BusMessage): Plan | undefined {
  if (msg.type === 'environmental.breach') {
    const b = breach.safeParse(msg.data);
    if (!b.success) return undefined;
    const d = b.data;
    const where = d.external_code ?? d.point_id ?? 'unknown point';
    const limits = `[${d.limit_min ?? '-∞'}, ${d.limit_max ?? '∞'}]`;
    return {
      targets: { role: 'qm' },
      point_key: d.point_id ?? d.external_code ?? d.parameter ?? '',
      content: {
        notification_type: 'environmental_breach',
        title: clip(`Environmental limit breached: ${d.parameter ?? 'reading'}`, 200),
        body: clip(`${where}: value ${d.value ?? '?'}${d.unit ? ` ${d.unit}` : ''} outside ${limits}${d.measured_at ? ` at ${d.measured_at}` : ''}`, 2000),
        link_url: null,
        entry_id: null,
      },
    };
  }
  if (msg.type === 'job.updated') {
    const j = jobUpdated.safeParse(msg.data);
    if (!j.success || !j.data.created_by || !TERMINAL.has(j.data.job.status)) return undefined;
    const { job } = j.data;
    const ok = job.status === 'succeeded';
    return {
      targets: { user_ids: [j.data.created_by] },
      content: {
        notification_type: 'job',
        title: clip(ok ? `Job ${job.job_type} finished` : `Job ${job.job_type} failed`, 200),
        body: clip(ok ? (job.status_text ?? `job ${job.id} succeeded`) : (job.error_message ?? `job ${job.id} failed`), 2000),
        link_url: null,
        entry_id: null,
      },
    };
  }
  return undefined;
}

export async function consumeReactions(deps: ServiceDeps, identity: IdentityPeer, settings: NotificationsSettings): Promise<void> {
  const quiet = settings.breachQuietMinutes;
  await consumeWithInbox<{ plan: Plan; members: string[] } | undefined>({
    bus: deps.bus,
    db: deps.db,
    schema: 'notifications',
    ...EVENT_ROUTES.notificationReactions,
    prefetch: 20,
    prepare: async (msg) => {
      const plan = msg.org_id ? planFor(msg) : undefined;
      if (!plan) return undefined;
      if (plan.point_key !== undefined && (await alertedRecently(deps.db.orm, msg.org_id!, plan.point_key, quiet))) return undefined;
      const caller = systemContext(msg.request_id ?? msg.id, msg.org_id);
      return { plan, members: await resolveMembers(identity, caller, msg.org_id!, plan.targets) };
    },
    handler: async (tx, msg, prepared) => {
      if (!prepared?.members.length) return;
      const { point_key } = prepared.plan;
      if (point_key !== undefined && !(await claimAlert(tx, msg.org_id!, point_key, quiet))) return;
      const emit = new Emitter('notifications', systemContext(msg.request_id ?? msg.id, msg.org_id));
      await insertNotifications(tx, emit, msg.org_id!, prepared.members, prepared.plan.content);
      await deps.outbox.insert(tx, emit.messages);
    },
  });
}
