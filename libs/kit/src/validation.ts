import type { z } from 'zod';
import { DomainError } from './errors.js';
import { jsonProblem, MAX_JSON_DEPTH } from './storable.js';
import { fieldIssues, type FieldIssue } from './field-issues.js';

export { fieldIssues, type FieldIssue } from './field-issues.js';

/**
 * The 400 of every request, in the project's shape: `details.fields` lists every
 * offending field ({path, message}); `details.field` repeats the first path for
 * clients that show one.
 */
export function validationFailed(issues: FieldIssue[], message = 'validation failed'): DomainError {
  return DomainError.invalid(message, { field: issues[0]?.path ?? '', fields: issues });
}

/** Parses input with a zod schema or throws 400 validation_failed naming every bad field. */
export function parseWith<S extends z.ZodType>(schema: S, input: unknown, message?: string): z.infer<S> {
  // reportInput: the formatter tells a missing field ("is required") from a wrong one
  const parsed = schema.safeParse(input, { reportInput: true });
  if (!parsed.success) throw validationFailed(fieldIssues(parsed.error), message);
  return parsed.data;
}

/**
 * 400 validation_failed for a parsed JSON value PostgreSQL could not store (NUL
 * or an unpaired surrogate, or a number JSON.parse made infinite, naming the
 * field) or nested too deep to walk safely.
 */
export function assertStorableJson(value: unknown): void {
  const problem = jsonProblem(value);
  if (problem?.kind === 'unstorable') {
    throw validationFailed([{ path: problem.path, message: 'text must not contain NUL characters or unpaired surrogates' }]);
  }
  if (problem?.kind === 'not_finite') {
    throw validationFailed([{ path: problem.path, message: 'number is out of range (it must be finite)' }]);
  }
  if (problem?.kind === 'too_deep') {
    throw validationFailed([{ path: '', message: `JSON must not nest deeper than ${MAX_JSON_DEPTH} levels` }]);
  }
}

/** A request body that must be a JSON object, with only text PostgreSQL can store. */
export function parseJsonObject(text: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text || '{}');
  } catch {
    throw validationFailed([{ path: '', message: 'body is not valid JSON' }]);
  }
  // refused here, naming the field, rather than failed in SQL
  assertStorableJson(value);
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw validationFailed([{ path: '', message: 'body must be a JSON object' }]);
  }
  return value as Record<string, unknown>;
}

/**
 * A body that came as a google.protobuf.Struct (an object by construction), with
 * only text PostgreSQL can store; none at all counts as an empty one.
 */
export function structBody(body: Record<string, unknown> | undefined): Record<string, unknown> {
  const value = body ?? {};
  // refused here, naming the field, rather than failed in SQL
  assertStorableJson(value);
  return value;
}

const GUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** Any 8-4-4-4-12 hex id, the shape PostgreSQL's uuid type accepts (as z.guid()). */
export const isGuid = (v: unknown): v is string => typeof v === 'string' && GUID.test(v);
