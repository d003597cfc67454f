import type { z } from 'zod';

/** One problem with one field of a request; `path` is dotted, '' for the body itself. */
export interface FieldIssue {
  path: string;
  message: string;
}

/**
 * The one formatter of validation problems, used by the gateway and by every
 * service, so a bad field reads the same whichever side caught it: plain words
 * ("is required", "must be a string", "must be one of: a, b"), never zod's own
 * texts ("Invalid input: expected string, received undefined") and never a
 * message about the whole body for one unknown key. Messages written by a schema
 * itself (refinements: "must be a UUID", "at least one scope") are kept, except
 * for a field that is not there at all: that one "is required", whatever check
 * would have been next.
 */
export function fieldIssues(error: z.ZodError): FieldIssue[] {
  const out: FieldIssue[] = [];
  for (const issue of error.issues) {
    const base = issue.path.map(String).join('.');
    if (issue.code === 'unrecognized_keys') {
      for (const key of issue.keys) out.push({ path: base ? `${base}.${key}` : key, message: 'unknown or read-only field' });
      continue;
    }
    out.push({ path: base, message: plainMessage(issue) });
  }
  return out;
}

type Issue = z.core.$ZodIssue;

const ARTICLE: Record<string, string> = {
  string: 'a string',
  number: 'a number',
  int: 'an integer',
  integer: 'an integer',
  boolean: 'a boolean (true or false)',
  array: 'an array',
  object: 'an object',
  date: 'a date',
  bigint: 'an integer',
  null: 'null',
  record: 'an object',
  map: 'an object',
  tuple: 'an array',
};

const FORMATS: Record<string, string> = {
  email: 'must be an email address',
  uuid: 'must be a UUID',
  guid: 'must be a UUID',
  url: 'must be a URL',
  datetime: 'must be an ISO 8601 timestamp with offset',
  date: 'must be a date (YYYY-MM-DD)',
  time: 'must be a time (HH:MM:SS)',
  regex: 'has an invalid format',
};

/** zod's texts for checks a schema gave no message of its own. */
const ZOD_DEFAULT = /^(Invalid |Too (small|big):|Unrecognized key)/;

/** Whether the issue is about a value that is not there (zod says "received undefined"). */
function isMissing(issue: Issue): boolean {
  if ('input' in issue && issue.input === undefined && issue.path.length > 0 && issue.code !== 'custom') return true;
  return issue.code === 'invalid_type' && /received undefined$/.test(issue.message);
}

const list = (values: readonly unknown[]) => values.map((v) => (typeof v === 'string' ? v : JSON.stringify(v))).join(', ');

function plainMessage(issue: Issue): string {
  if (isMissing(issue)) return 'is required';
  // a message the schema wrote itself is already in plain words
  if (!ZOD_DEFAULT.test(issue.message)) return issue.message;
  switch (issue.code) {
    case 'invalid_type':
      return `must be ${ARTICLE[issue.expected] ?? issue.expected}`;
    case 'invalid_value':
      return issue.values.length === 1 ? `must be ${list(issue.values)}` : `must be one of: ${list(issue.values)}`;
    case 'too_small':
      return bound(issue.origin, 'least', issue.minimum, issue.inclusive);
    case 'too_big':
      return bound(issue.origin, 'most', issue.maximum, issue.inclusive);
    case 'invalid_format':
      return FORMATS[issue.format] ?? `must be in ${issue.format} format`;
    case 'not_multiple_of':
      return `must be a multiple of ${String(issue.divisor)}`;
    case 'invalid_union':
      return 'does not match any of the allowed shapes';
    case 'invalid_key':
      return 'has an invalid key';
    case 'invalid_element':
      return 'has an invalid element';
    default:
      return 'is not valid';
  }
}

function bound(origin: string, side: 'least' | 'most', n: number | bigint, inclusive = true): string {
  const v = Number(n);
  switch (origin) {
    case 'string':
      if (side === 'least' && v === 1) return 'must not be empty';
      return `must be at ${side} ${v} characters long`;
    case 'array':
    case 'set':
      if (side === 'least' && v === 1) return 'must have at least one item';
      return `must have at ${side} ${v} items`;
    default:
      if (!inclusive) return `must be ${side === 'least' ? 'greater' : 'less'} than ${v}`;
      return `must be at ${side} ${v}`;
  }
}
