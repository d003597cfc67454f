import { z } from 'zod';
import { defineResource, validationFailed, type Resource } from '@lab/kit';
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
export const MAX_DOCUMENT_BYTES = 1_000_000;

function bounded(data: Record<string, unknown>): { data: Record<string, unknown> } {
  if (Buffer.byteLength(JSON.stringify(data)) > MAX_DOCUMENT_BYTES) {
    const message = `the record would exceed ${MAX_DOCUMENT_BYTES} bytes as JSON (the keys given are merged into the stored ones)`;
    throw validationFailed([{ path: '', message }], message);
  }
  return { data };
}

/** A stored document as clients see it: the common fields, then the object's own keys. */
function flatten(row: Record<string, unknown>): Record<string, unknown> {
  const { data, ...common } = row;
  const { created_by, created_at, updated_at, ...ids } = common;
  return { ...ids, ...(data as object), created_by, created_at, updated_at };
}

export const flattenDocument = (json: string): string => JSON.stringify(flatten(JSON.parse(json) as Record<string, unknown>));
export const flattenDocuments = (json: string): string =>
  JSON.stringify((JSON.parse(json) as Record<string, unknown>[]).map(flatten));

/**
 * A free-form record (calibration, qualification): the body object is stored
 * as given in `data` and returned merged with the common fields. PATCH and PUT
 * merge the given top-level keys into the stored object.
 */
function documentResource(sub: 'calibrations' | 'qualifications', auditResource: string): Resource {
  return defineResource({
    name: `equipment/${sub}`,
    table: `equipment.${sub}`,
    auditResource,
    parent: underEquipment,
    create: documentBody,
    update: documentBody,
    orderBy: ['updated_at'],
    limits: SUB_LIST_LIMITS,
    rangeColumn: 'created_at',
    ...childAccess(),
    present: { one: flattenDocument, many: flattenDocuments },
    beforeCreate: async (_tx, _caller, input) => bounded(input as Record<string, unknown>),
    beforeUpdate: async (_tx, _caller, input, before) => bounded({ ...(before.data as Record<string, unknown>), ...(input as Record<string, unknown>) }),
  });
}

export const calibrations = documentResource('calibrations', 'equipment_calibration');
export const qualifications = documentResource('qualifications', 'equipment_qualification');
