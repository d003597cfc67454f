import { z } from 'zod';
import { validationFailed } from '@lab/kit';
import { defineResource, type Resource } from '@lab/records';
import { underEquipment } from './equipment.js';
import { SUB_LIST_LIMITS } from './fields.js';
import { childAccess } from './permissions.js';

/** Fields the service sets on every document; a body may not carry them. */
const COMMON = ['id', 'equipment_id', 'created_by', 'created_at', 'updated_at'] as const;

const documentBody = z.record(z.string(), z.unknown()).superRefine((body, ctx) => {
  for (const key of COMMON) {
    if (Object.hasOwn(body, key)) ctx.addIssue({ code: 'custom', path: [key], message: 'read-only field' });
  }
});

/**
 * The most a document may hold, as JSON: what one request body may carry (1 MB).
 * PATCH merges keys into the stored object, so without a bound repeated PATCHes
 * would grow one record without limit, and every later read, update and audit
 * record with it.
 */
const MAX_DOCUMENT_BYTES = 1_000_000;

function bounded(data: Record<string, unknown>): { data: Record<string, unknown> } {
  if (Buffer.byteLength(JSON.stringify(data)) > MAX_DOCUMENT_BYTES) {
    const message = `the record would exceed ${MAX_DOCUMENT_BYTES} bytes as JSON (the keys given are merged into the stored ones)`;
    throw validationFailed([{ path: '', message }], message);
  }
  return { data };
}

/**
 * A free-form record (calibration, qualification): the body object is stored
 * as given in `data`; clients see its keys merged with the common fields (the
 * calibration and qualification cases of the typed record, libs/contracts
 * record-json.ts: every answer, a keyed write's replay included). PATCH and PUT
 * merge the given top-level keys into the stored object.
 */
function documentResource(sub: 'calibrations' | 'qualifications', auditResource: string): Resource {
  return defineResource({
    name: `equipment/${sub}`,
    record: sub === 'calibrations' ? 'calibration' : 'qualification',
    table: `equipment.${sub}`,
    auditResource,
    parent: underEquipment,
    create: documentBody,
    update: documentBody,
    orderBy: ['updated_at'],
    limits: SUB_LIST_LIMITS,
    rangeColumn: 'created_at',
    ...childAccess(),
    beforeCreate: async (_tx, _caller, input) => bounded(input),
    beforeUpdate: async (_tx, _caller, input, before) => bounded({ ...(before.data as Record<string, unknown>), ...input }),
  });
}

export const calibrations = documentResource('calibrations', 'equipment_calibration');
export const qualifications = documentResource('qualifications', 'equipment_qualification');
