import type { CallerContext, Emitter } from '@lab/kit';
import type { RecordJson } from '@lab/records';

/**
 * The notebook's domain events. Each carries exactly the data fields the spec
 * lists for it (routing key = event name, org_id = the record's organisation).
 */
const pick = (row: RecordJson, keys: string[]) => Object.fromEntries(keys.map((k) => [k, row[k] ?? null]));

/** Emits `<subject>.status_changed` when (and only when) the status differs. */
function statusChanged(emit: Emitter, caller: CallerContext, subject: string, label: string, before: RecordJson, after: RecordJson) {
  if (before.status === after.status) return;
  emit.event(`${subject}.status_changed`, caller.org_id, {
    id: after.id,
    [label]: after[label] ?? null,
    old_status: before.status,
    new_status: after.status,
    updated_at: after.updated_at,
  });
}

export const experimentEvents = {
  created: (emit: Emitter, caller: CallerContext, after: RecordJson) =>
    emit.event('experiment.created', caller.org_id, pick(after, ['id', 'display_id', 'title', 'status', 'project_id', 'author_id', 'created_at'])),
  statusChanged: (emit: Emitter, caller: CallerContext, before: RecordJson, after: RecordJson) =>
    statusChanged(emit, caller, 'experiment', 'display_id', before, after),
  signed: (emit: Emitter, caller: CallerContext, after: RecordJson) =>
    emit.event('experiment.signed', caller.org_id, pick(after, ['id', 'display_id', 'signed_by', 'signed_at'])),
};

export const sampleEvents = {
  created: (emit: Emitter, caller: CallerContext, after: RecordJson) =>
    emit.event('sample.created', caller.org_id, pick(after, ['id', 'name', 'type', 'status', 'storage_location_id', 'created_at'])),
  statusChanged: (emit: Emitter, caller: CallerContext, before: RecordJson, after: RecordJson) => statusChanged(emit, caller, 'sample', 'name', before, after),
};
