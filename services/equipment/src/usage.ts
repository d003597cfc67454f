import { z } from 'zod';
import { validationFailed } from '@lab/kit';
import { defineResource, type RecordJson } from '@lab/records';
import { underEquipment } from './equipment.js';
import { usageEvents } from './events.js';
import { object, reference, SUB_LIST_LIMITS, text, timestamp } from './fields.js';
import { childAccess } from './permissions.js';

const createUsage = z.strictObject({
  started_at: timestamp.optional(),
  ended_at: timestamp.nullable().optional(),
  purpose: z.string().trim().max(2000).nullable().optional(),
  project_id: reference.nullable().optional(),
  entry_id: reference.nullable().optional(),
  settings: object.optional(),
  notes: text.nullable().optional(),
});

/**
 * A 400 naming ended_at when it lies before started_at. The table's check
 * constraint holds the rule too; this gives the common case a clear answer
 * before any SQL runs.
 */
function assertOrdered(startedAt: unknown, endedAt: unknown): void {
  if (endedAt == null || startedAt == null) return;
  // the times as given: ISO text, or a Date from a stored row
  /* eslint-disable @typescript-eslint/no-base-to-string -- see above */
  const start = Date.parse(String(startedAt));
  const end = Date.parse(String(endedAt));
  /* eslint-enable @typescript-eslint/no-base-to-string */
  if (!Number.isNaN(start) && !Number.isNaN(end) && end < start) {
    throw validationFailed([{ path: 'ended_at', message: 'ended_at must not be before started_at' }]);
  }
}

const completes = (before: RecordJson | null, after: RecordJson) => after.ended_at != null && (before === null || before.ended_at == null);

/**
 * Usage sessions. One open session (ended_at null) per equipment, enforced by
 * a partial unique index; setting ended_at completes the session
 * (duration_minutes is computed by the database). A completed session keeps
 * an end: ended_at may be corrected but not cleared.
 */
export const usage = defineResource({
  name: 'equipment/usage',
  record: 'usage_session',
  table: 'equipment.usage_sessions',
  auditResource: 'equipment_usage',
  parent: underEquipment,
  create: createUsage,
  update: createUsage.partial(),
  filters: { user_id: 'uuid', project_id: 'uuid', entry_id: 'uuid', auto_closed: 'boolean' },
  references: {
    project_id: { noun: 'project', peer: 'notebook.projects' },
    entry_id: { noun: 'experiment entry', peer: 'notebook.experiments' },
  },
  orderBy: ['started_at', 'ended_at', 'updated_at'],
  defaultOrder: { by: 'started_at', dir: 'desc' },
  limits: SUB_LIST_LIMITS,
  rangeColumn: 'started_at',
  ...childAccess(['user_id']),
  async beforeCreate(_tx, caller, input) {
    const started_at = input.started_at ?? new Date().toISOString();
    assertOrdered(started_at, input.ended_at);
    return { ...input, started_at, user_id: caller.user_id };
  },
  async beforeUpdate(_tx, _caller, input, before) {
    if (before.ended_at != null && input.ended_at === null) {
      throw validationFailed([{ path: 'ended_at', message: 'a completed usage session cannot be reopened' }]);
    }
    assertOrdered(input.started_at ?? before.started_at, input.ended_at === undefined ? before.ended_at : input.ended_at);
    return input;
  },
  afterCreate(_tx, emit, caller, _before, after) {
    usageEvents.started(emit, caller.org_id!, after);
    if (completes(null, after)) usageEvents.completed(emit, caller.org_id!, after);
  },
  afterUpdate(_tx, emit, caller, before, after) {
    if (completes(before, after)) usageEvents.completed(emit, caller.org_id!, after);
  },
});
