import { sql } from 'drizzle-orm';
import { OutageLog, rows, type ServiceDeps } from '@lab/kit';
import { type RecordJson } from '@lab/records';
import { usageEvents } from './events.js';
import { usage } from './usage.js';

export interface UsageSweepOptions {
  /** sessions open longer than this are closed (fractions allowed) */
  maxHours: number;
  /** how often the sweep runs */
  intervalMs: number;
  /** sessions closed per transaction */
  batchSize?: number;
}

/**
 * Closes one batch of usage sessions open longer than maxHours, as of
 * started_at + maxHours, with auto_closed = true, their completion events and
 * audit records. It runs for every organisation (a system task, no caller);
 * rows are claimed with FOR UPDATE SKIP LOCKED so replicas sweeping at the
 * same time close each session once. Returns how many it closed.
 */
export async function closeOverdueSessions(deps: Pick<ServiceDeps, 'outbox'>, maxHours: number, batchSize = 200): Promise<number> {
  const max = sql`(${maxHours}::float8 * interval '1 hour')`;
  return deps.outbox.write(null, async (tx, emit) => {
    const closed = await rows<{ org_id: string; before: string; after: string }>(
      tx,
      sql`with due as (
            select id from equipment.usage_sessions
            where ended_at is null and started_at + ${max} <= now()
            order by started_at limit ${batchSize}
            for update skip locked
          ), old as (
            select s.id, row_to_json(s)::text as before from equipment.usage_sessions s join due using (id)
          )
          update equipment.usage_sessions u
          set ended_at = u.started_at + ${max}, auto_closed = true, updated_at = now()
          from old where u.id = old.id
          returning u.org_id::text as org_id, old.before, row_to_json(u)::text as after`,
    );
    const shown = (json: string): RecordJson => {
      const { org_id: _org, ...row } = JSON.parse(json) as RecordJson;
      return row;
    };
    for (const c of closed) {
      const after = shown(c.after);
      usageEvents.completed(emit, c.org_id, after);
      emit.audit(c.org_id, { action: 'update', resource: usage.auditResource, record_id: String(after.id), before: shown(c.before), after });
    }
    return closed.length;
  });
}

/** Runs the sweep every intervalMs until the returned stop hook is called. */
export function startUsageSweep(deps: Pick<ServiceDeps, 'outbox' | 'log'>, opts: UsageSweepOptions): () => Promise<void> {
  const batch = opts.batchSize ?? 200;
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  let running: Promise<void> | undefined;
  // a failing sweep (the database away) is logged as it starts and ends, not every pass
  const outages = new OutageLog(deps.log, { fields: { retry: 'the next pass retries' } });
  const pass = async () => {
    try {
      while (!stopped && (await closeOverdueSessions(deps, opts.maxHours, batch)) === batch) {
        /* a full batch: there may be more */
      }
      outages.success('usage auto-close sweep');
    } catch (err) {
      outages.failure('usage auto-close sweep', err);
    }
  };
  const tick = () => {
    running = pass().finally(() => {
      running = undefined;
      if (!stopped) {
        timer = setTimeout(tick, opts.intervalMs);
        timer.unref();
      }
    });
  };
  timer = setTimeout(tick, opts.intervalMs);
  timer.unref();
  return async () => {
    stopped = true;
    if (timer) clearTimeout(timer);
    await running;
  };
}
