import { z } from 'zod';

/**
 * What JSON and ISO 8601 admit but PostgreSQL cannot store, checked at the edge
 * so that such input is a 400 naming the field rather than a failed statement
 * (500): unpaired UTF-16 surrogates and NUL in text, year 0000, offsets and
 * runs of fraction digits PostgreSQL refuses. One definition for every service.
 */

/** 0001-01-01T00:00:00Z: PostgreSQL renders earlier instants as BC and refuses year 0000. */
const FIRST_INSTANT = -62_135_596_800_000;
/** PostgreSQL accepts UTC offsets below 16 hours only. */
const MAX_OFFSET_HOURS = 16;

/** More fraction digits than nanoseconds: PostgreSQL refuses a long enough run of them. */
const LONG_FRACTION = /\.\d{10,}/;

/** Whether PostgreSQL's timestamptz stores an ISO 8601 timestamp as given. */
export function storableTimestamp(value: string): boolean {
  if (LONG_FRACTION.test(value)) return false;
  const offset = /[+-](\d{2}):?(\d{2})$/.exec(value);
  if (offset && Number(offset[1]) >= MAX_OFFSET_HOURS) return false;
  const t = Date.parse(value);
  return Number.isFinite(t) && t >= FIRST_INSTANT;
}

/** Whether PostgreSQL's date stores a YYYY-MM-DD date (year 1 on). */
export const storableDate = (value: string): boolean => !value.startsWith('0000');

const TIMESTAMP_MESSAGE = 'must be an ISO 8601 timestamp with offset, from year 1 on, with an offset under 16 hours and at most 9 fraction digits';

/** An ISO 8601 timestamp with offset (Z or ±hh:mm) that PostgreSQL can store. */
export const isoTimestamp = (message = TIMESTAMP_MESSAGE) => z.iso.datetime({ offset: true, error: message }).refine(storableTimestamp, message);

/** A YYYY-MM-DD date that PostgreSQL can store. */
export const isoDate = (message = 'must be a date YYYY-MM-DD from year 1 on') => z.iso.date(message).refine(storableDate, message);

/** Text PostgreSQL cannot store: NUL, or an unpaired UTF-16 surrogate (JSON can carry one: \ud800). */
const UNSTORABLE_TEXT = /\0|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

export const storableText = (value: string): boolean => !UNSTORABLE_TEXT.test(value);

// eslint-disable-next-line no-control-regex -- control characters are what this finds
const CONTROL_CHARACTERS = /[\0-\x1f\x7f]/;

/**
 * Whether text holds a control character (C0 or DEL). In a URL the parser would
 * strip (tab, CR, LF) or encode it, so the URL kept would not be the one given,
 * and CR/LF in a URL put into a header could split it: URLs taken from outside
 * (webhook receivers, OAuth redirect URIs) refuse them.
 */
export const hasControlCharacters = (value: string): boolean => CONTROL_CHARACTERS.test(value);

/** How deep a request's JSON may nest: deeper documents are refused, never walked recursively. */
export const MAX_JSON_DEPTH = 512;

export type JsonProblem = { kind: 'unstorable'; path: string } | { kind: 'not_finite'; path: string } | { kind: 'too_deep' };

/**
 * Whether JSON text may hold a number JSON.parse makes infinite (1e309, or more
 * than 308 digits): stored, it would silently become null. A cheap look at the
 * bytes, so that most bodies skip the walk of jsonProblem. The run of 309 digits
 * is looked for only where a run starts (the lookbehind): tried at every digit,
 * each number cost the square of its length, and an ingest batch of 500 readings
 * (60 KB) took 0.5-0.7 ms instead of 0.25-0.3.
 */
export const mayHoldHugeNumber = (text: string): boolean => /[eE]\+?0*[1-9]\d{2}|(?<!\d)\d{309}/.test(text);

/**
 * The first string or key PostgreSQL cannot store, the first number that is not
 * finite (JSON text like 1e309 parses to Infinity), or a nesting deeper than
 * MAX_JSON_DEPTH, in a parsed JSON value; undefined when there is none. The walk
 * is iterative, so a deeply nested body cannot overflow the stack, and builds no
 * paths until it finds a problem (it runs over whole request bodies).
 */
export function jsonProblem(value: unknown, maxDepth = MAX_JSON_DEPTH): JsonProblem | undefined {
  const values: unknown[] = [value];
  const depths: number[] = [0];
  while (values.length) {
    const v = values.pop();
    const depth = depths.pop()!;
    if (typeof v === 'string') {
      if (!storableText(v)) return { kind: 'unstorable', path: pathTo(value, v) };
      continue;
    }
    if (typeof v === 'number') {
      if (!Number.isFinite(v)) return { kind: 'not_finite', path: pathTo(value, v) };
      continue;
    }
    if (v === null || typeof v !== 'object') continue;
    if (depth >= maxDepth) return { kind: 'too_deep' };
    if (Array.isArray(v)) {
      for (const x of v) {
        values.push(x);
        depths.push(depth + 1);
      }
      continue;
    }
    for (const k in v) {
      if (!Object.hasOwn(v, k)) continue;
      if (!storableText(k)) return { kind: 'unstorable', path: pathTo(value, k, true) };
      values.push((v as Record<string, unknown>)[k]);
      depths.push(depth + 1);
    }
  }
  return undefined;
}

/** The dotted path of a bad string or number value (or key) found by jsonProblem, looked for within its depth bound. */
function pathTo(root: unknown, target: string | number, isKey = false): string {
  const stack: { v: unknown; path: string; depth: number }[] = [{ v: root, path: '', depth: 0 }];
  while (stack.length) {
    const { v, path, depth } = stack.pop()!;
    if (v === null || typeof v !== 'object' || depth >= MAX_JSON_DEPTH) continue;
    const entries: [string, unknown][] = Array.isArray(v) ? v.map((x, i) => [String(i), x]) : Object.entries(v);
    for (const [k, x] of entries) {
      const at = path ? `${path}.${k}` : k;
      if ((isKey && k === target) || (!isKey && x === target)) return at;
      stack.push({ v: x, path: at, depth: depth + 1 });
    }
  }
  return '';
}
