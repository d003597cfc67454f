import type { FilterType, Resource } from './resource.js';
import { isoDate, isoTimestamp, storableDate, storableText, isGuid, validationFailed, MAX_LIST_OFFSET } from '@lab/kit';

const TIMESTAMP = isoTimestamp();
const DATE_ONLY = isoDate();

/** A validated list request of one resource. */
export interface ListQuery {
  limit: number;
  offset: number;
  orderBy: string;
  order: 'asc' | 'desc';
  /** allowlisted equality filters, values already checked against their type */
  filters: { field: string; type: FilterType; value: string }[];
  /** the start of a label (name, title, display id) the records must have, case-insensitively */
  labelPrefix?: string;
  /** bounds on the resource's rangeColumn (ISO 8601 timestamps) */
  from?: string;
  to?: string;
}

/**
 * Query keys the gateway may forward that are not the resource's business:
 * org_id selects the organisation of a PAT and has been applied already.
 */
const IGNORED = new Set(['org_id']);

const DATE = /^\d{4}-\d{2}-\d{2}$/;
const INT = /^\d+$/;

/**
 * Parses the raw query-string map of ListRecords against a resource's
 * allowlists. Every key must be a paging key or an allowlisted filter; a bad
 * value or an unknown key is 400 validation_failed naming the field.
 */
export function parseListQuery(query: Record<string, string>, resource: Resource): ListQuery {
  const { limits } = resource;
  const out: ListQuery = {
    limit: limits.default,
    offset: 0,
    orderBy: resource.defaultOrder.by,
    order: resource.defaultOrder.dir,
    filters: [],
  };
  for (const [key, value] of Object.entries(query)) {
    switch (key) {
      case 'limit':
        out.limit = intIn(key, value, 1, limits.max);
        break;
      case 'offset':
        out.offset = intIn(key, value, 0, MAX_LIST_OFFSET);
        break;
      case 'order_by':
        if (!resource.orderBy.includes(value)) {
          throw bad(key, `must be one of ${resource.orderBy.join(', ')}`);
        }
        out.orderBy = value;
        break;
      case 'order': {
        const dir = value.toLowerCase();
        if (dir !== 'asc' && dir !== 'desc') throw bad(key, 'must be asc or desc');
        out.order = dir;
        break;
      }
      case 'label_prefix':
        if (!resource.labels.length) throw bad(key, 'unknown query parameter');
        if (value.length > 200 || !storableText(value)) throw bad(key, 'must be at most 200 characters, without NUL characters or unpaired surrogates');
        out.labelPrefix = value;
        break;
      case 'from':
      case 'to':
        if (!resource.rangeColumn) throw bad(key, 'unknown query parameter');
        if (!TIMESTAMP.safeParse(value).success && !DATE_ONLY.safeParse(value).success) {
          throw bad(key, 'must be an ISO 8601 timestamp with offset or a date YYYY-MM-DD (year 1 on)');
        }
        out[key] = value;
        break;
      default: {
        if (IGNORED.has(key)) break;
        const type = Object.hasOwn(resource.filters, key) ? resource.filters[key] : undefined;
        if (!type) throw bad(key, 'unknown query parameter');
        out.filters.push({ field: key, type, value: filterValue(key, type, value) });
      }
    }
  }
  return out;
}

function intIn(field: string, value: string, min: number, max: number): number {
  const n = INT.test(value) ? Number(value) : NaN;
  if (!Number.isSafeInteger(n) || n < min || n > max) {
    throw bad(field, max === MAX_LIST_OFFSET ? `must be an integer >= ${min}` : `must be an integer from ${min} to ${max}`);
  }
  return n;
}

function filterValue(field: string, type: FilterType, value: string): string {
  switch (type) {
    case 'uuid':
      if (!isGuid(value)) throw bad(field, 'must be a UUID');
      return value.toLowerCase();
    case 'date':
      if (
        !DATE.test(value) ||
        !storableDate(value) ||
        Number.isNaN(Date.parse(`${value}T00:00:00Z`)) ||
        new Date(`${value}T00:00:00Z`).toISOString().slice(0, 10) !== value
      ) {
        throw bad(field, 'must be a date YYYY-MM-DD');
      }
      return value;
    case 'boolean': {
      const v = value.toLowerCase();
      if (v !== 'true' && v !== 'false') throw bad(field, 'must be true or false');
      return v;
    }
    case 'string':
      if (!storableText(value)) throw bad(field, 'must not contain NUL characters or unpaired surrogates');
      return value;
  }
}

const bad = (field: string, message: string) => validationFailed([{ path: field, message: `${field} ${message}` }], `invalid query parameter ${field}`);
