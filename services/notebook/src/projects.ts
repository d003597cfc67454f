import { sql } from 'drizzle-orm';
import { z } from 'zod';
import { type CallerContext, rows, type Tx, validationFailed } from '@lab/kit';
import { defineResource, departmentAccess } from '@lab/records';
import { date, name, reference, status, tags, text } from './fields.js';

const createProject = z.strictObject({
  name,
  description: text.nullable().optional(),
  status: status.optional(),
  tags: tags.optional(),
  department_id: reference.nullable().optional(),
  lead_researcher_id: reference.nullable().optional(),
  parent_project_id: reference.nullable().optional(),
  start_date: date.nullable().optional(),
});

/** A project may not become its own ancestor. */
async function assertNoCycle(tx: Tx, caller: CallerContext, projectId: string, parentId: string | null | undefined) {
  if (parentId == null) return;
  const [hit] = await rows<{ found: boolean }>(
    tx,
    sql`with recursive up(id, parent) as (
          select id, parent_project_id from notebook.projects where id = ${parentId}::uuid and org_id = ${caller.org_id}::uuid
          union
          select p.id, p.parent_project_id from notebook.projects p join up on p.id = up.parent
          where p.org_id = ${caller.org_id}::uuid
        )
        select exists (select 1 from up where id = ${projectId}::uuid) as found`,
  );
  if (hit?.found) throw validationFailed([{ path: 'parent_project_id', message: 'a project cannot be nested under itself' }]);
}

export const projects = defineResource({
  name: 'projects',
  record: 'project',
  table: 'notebook.projects',
  auditResource: 'project',
  create: createProject,
  // no create hooks: a create inserts its row and emits (decision 034)
  sharedCreates: true,
  update: createProject.partial(),
  labels: ['name'],
  filters: {
    status: 'string',
    department_id: 'uuid',
    lead_researcher_id: 'uuid',
    parent_project_id: 'uuid',
    start_date: 'date',
    name: 'string',
  },
  orderBy: ['updated_at', 'name', 'status', 'start_date'],
  references: {
    parent_project_id: { noun: 'project', table: 'notebook.projects' },
    department_id: { noun: 'department', peer: 'department' },
    lead_researcher_id: { noun: 'member', peer: 'member' },
  },
  ...departmentAccess(['lead_researcher_id', 'created_by']),
  async beforeUpdate(tx, caller, input, before) {
    await assertNoCycle(tx, caller, String(before.id), input.parent_project_id);
    return input;
  },
});
