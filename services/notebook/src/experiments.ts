import { z } from 'zod';
import { DomainError } from '@lab/kit';
import { defineResource, departmentAccess, type RecordJson } from '@lab/records';
import { nextDisplayId } from './display-id.js';
import { experimentEvents } from './events.js';
import { object, reference, status, tags, text } from './fields.js';

export const createExperiment = z.strictObject({
  title: z.string().trim().max(500).optional(),
  description: text.nullable().optional(),
  content: object.optional(),
  status: status.optional(),
  tags: tags.optional(),
  project_id: reference.nullable().optional(),
  template_id: reference.nullable().optional(),
  department_id: reference.nullable().optional(),
});

const experimentAccess = departmentAccess(['author_id', 'created_by']);

/**
 * A signed experiment is locked: its content, and the experiment itself, no
 * longer change. A change is made as an amendment (a new version, see
 * amendments.ts).
 */
function assertNotSigned(row: RecordJson): void {
  if (row.signed_at) {
    throw DomainError.conflict('the experiment is signed and cannot change; amend it instead (POST /v1/experiments/{id}/amendments)', 'experiment_signed', {
      signed_at: row.signed_at,
    });
  }
}

/**
 * Experiments (notebook entries). display_id and author_id are set by the
 * service; signed_at / signed_by only by SignExperiment, never by REST writes;
 * version, amends_id and amendment_reason only by an amendment.
 */
export const experiments = defineResource({
  name: 'experiments',
  record: 'experiment',
  table: 'notebook.experiments',
  auditResource: 'experiment',
  create: createExperiment,
  // the create's one other write is the display counter's single upsert, which
  // numbers the creates of a shared transaction one after another (decision 034)
  sharedCreates: true,
  update: createExperiment.partial(),
  labels: ['title', 'display_id'],
  filters: {
    status: 'string',
    project_id: 'uuid',
    template_id: 'uuid',
    author_id: 'uuid',
    department_id: 'uuid',
    display_id: 'string',
    signed_by: 'uuid',
    amends_id: 'uuid',
  },
  orderBy: ['updated_at', 'title', 'status', 'display_id', 'signed_at', 'version'],
  // template_id is not checked: the product has no templates to name (docs/decisions.md, "References")
  references: {
    project_id: { noun: 'project', table: 'notebook.projects' },
    department_id: { noun: 'department', peer: 'department' },
  },
  ...experimentAccess,
  assertUnlocked: assertNotSigned,
  async beforeCreate(tx, caller, input) {
    return {
      ...input,
      // an entry belongs to its author's department unless the body says otherwise
      department_id: input.department_id === undefined ? caller.department_id : input.department_id,
      display_id: await nextDisplayId(tx, caller.org_id!, 'EXP'),
      author_id: caller.user_id,
    };
  },
  afterCreate: (_tx, emit, caller, _before, after) => experimentEvents.created(emit, caller, after),
  afterUpdate: (_tx, emit, caller, before, after) => experimentEvents.statusChanged(emit, caller, before, after),
});
