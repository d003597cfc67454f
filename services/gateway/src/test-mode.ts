import { validationFailed } from '@lab/kit';
import { assertMay } from '@lab/permissions';
import type { Principal } from './auth.js';
import { objectBody } from './handlers/records.js';
import { type RecordOp, json, type Reply } from '@lab/http-api';

/**
 * Whether a request asks for test mode: `X-Test-Mode: true` (any case) does,
 * `false` or no header does not. Any other value is refused (400): a client that
 * meant test mode and wrote `yes` or `1` must not have its write or delete made
 * for real.
 */
export function isTestMode(header: string | string[] | undefined): boolean {
  if (header === undefined) return false;
  const value = (Array.isArray(header) ? header.join(',') : header).trim().toLowerCase();
  if (value === 'true') return true;
  if (value === 'false') return false;
  throw validationFailed([{ path: 'X-Test-Mode', message: 'must be true or false' }], 'X-Test-Mode must be true or false');
}

/**
 * The preliminary write permission of X-Test-Mode (the route's write scope is
 * already checked), the permission model's as the records engine applies it: a
 * role that may not write is refused, and a delete needs an administrator role,
 * or the admin scope for an API key that acts as no user. The record-level
 * rule needs the record, which test mode does not read.
 */
export function checkWritePermission(p: Principal, op: RecordOp): void {
  assertMay(p, 'write');
  if (op === 'delete') assertMay(p, 'delete');
}

const OPERATION: Partial<Record<RecordOp, string>> = { create: 'create', update: 'update', replace: 'replace', delete: 'delete' };

/**
 * The echo of a generic CRUD write under X-Test-Mode: no field is validated and
 * nothing is changed. The body must still be a JSON object, as for the real write
 * (400 otherwise): an array or a scalar could never apply.
 */
export function testModeReply(p: Principal, op: RecordOp, resource: string, id: string | undefined, body: unknown): Reply {
  const operation = OPERATION[op];
  if (!operation) throw new Error(`X-Test-Mode does not apply to ${op}`);
  checkWritePermission(p, op);
  const wouldApply: Record<string, unknown> = { operation, resource };
  if (id !== undefined) wouldApply.id = id;
  if (op !== 'delete' && body !== undefined) wouldApply.body = objectBody(body);
  return json(200, { data: { test_mode: true, would_apply: wouldApply } });
}
