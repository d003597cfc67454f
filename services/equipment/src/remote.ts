import { sql } from 'drizzle-orm';
import { z } from 'zod';
import type { records } from '@lab/contracts';
import { DomainError, isGuid, rows, violatedConstraint, type Database, type Handlers } from '@lab/kit';
import { defineResource } from '@lab/records';
import { CONSTRAINT_RULES } from './constraint-errors.js';
import { underEquipment } from './equipment.js';
import { text } from './fields.js';
import { childAccess } from './permissions.js';

type RecordHandlers = Handlers<typeof records.RecordServiceService>;

const createRemote = z.strictObject({
  url: z.url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' }).max(2000),
  protocol: z.enum(['http', 'https', 'vnc', 'rdp', 'ssh', 'vendor', 'other']).optional(),
  label: z.string().trim().max(200).nullable().optional(),
  notes: text.nullable().optional(),
  enabled: z.boolean().optional(),
});

/** The remote link of a piece of equipment: a link record, at most one per equipment. */
export const remote = defineResource({
  name: 'equipment/remote',
  record: 'remote_link',
  table: 'equipment.remote_links',
  auditResource: 'equipment_remote_link',
  parent: underEquipment,
  create: createRemote,
  update: createRemote.partial(),
  ...childAccess(),
});

/**
 * The link is addressed by its equipment, not by an id of its own: these
 * handlers find the link id of `parent_id` and hand over to the generic ones,
 * which check the equipment's visibility, permissions and write the audit
 * record. POST and PUT upsert (create when there is no link, else change the
 * given fields); PATCH, GET and DELETE need an existing link.
 */
export function remoteLinkHandlers(base: RecordHandlers, db: Database): RecordHandlers {
  const existing = async (orgId: string | null, parentId: string): Promise<string | undefined> => {
    if (!orgId) throw DomainError.forbidden('no organisation selected', 'org_required');
    if (!isGuid(parentId)) throw DomainError.notFound('equipment not found');
    const [row] = await rows<{ id: string }>(
      db.orm,
      sql`select id::text as id from equipment.remote_links where org_id = ${orgId}::uuid and equipment_id = ${parentId}::uuid`,
    );
    return row?.id;
  };
  const required = async (orgId: string | null, parentId: string): Promise<string> => {
    const id = await existing(orgId, parentId);
    if (!id) throw DomainError.notFound('this equipment has no remote link');
    return id;
  };
  const upsert = async (body: Record<string, unknown> | undefined, parentId: string, caller: Parameters<RecordHandlers['createRecord']>[1]) => {
    for (let attempt = 0; ; attempt++) {
      const id = await existing(caller.org_id, parentId);
      if (id) return base.updateRecord({ resource: remote.name, id, body, replace: true, parent_id: parentId }, caller);
      try {
        return await base.createRecord({ resource: remote.name, body, parent_id: parentId }, caller);
      } catch (err) {
        // a concurrent upsert created it first: change that link instead
        if (attempt > 0 || violatedConstraint(err, Object.keys(CONSTRAINT_RULES)) !== 'remote_links_equipment_key') throw err;
      }
    }
  };

  return {
    listRecords: (req, caller) => {
      if (req.resource === remote.name) throw DomainError.notFound('the remote link is not a list');
      return base.listRecords(req, caller);
    },
    getRecord: async (req, caller) => {
      if (req.resource !== remote.name) return base.getRecord(req, caller);
      return base.getRecord({ ...req, id: await required(caller.org_id, req.parent_id) }, caller);
    },
    createRecord: (req, caller) => {
      if (req.resource !== remote.name) return base.createRecord(req, caller);
      return upsert(req.body, req.parent_id, caller);
    },
    updateRecord: async (req, caller) => {
      if (req.resource !== remote.name) return base.updateRecord(req, caller);
      if (req.replace) return upsert(req.body, req.parent_id, caller);
      return base.updateRecord({ ...req, id: await required(caller.org_id, req.parent_id) }, caller);
    },
    deleteRecord: async (req, caller) => {
      if (req.resource !== remote.name) return base.deleteRecord(req, caller);
      return base.deleteRecord({ ...req, id: await required(caller.org_id, req.parent_id) }, caller);
    },
  };
}
