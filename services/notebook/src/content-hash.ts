import { createHash } from 'node:crypto';
import type { RecordJson } from '@lab/records';

/**
 * The fields of an experiment version that a signature covers: everything the
 * record says, not the bookkeeping that signing itself changes (signed_at,
 * signed_by, updated_at).
 */
const SIGNED_FIELDS = [
  'id',
  'display_id',
  'version',
  'amends_id',
  'amendment_reason',
  'title',
  'description',
  'content',
  'status',
  'tags',
  'project_id',
  'template_id',
  'department_id',
  'author_id',
  'created_by',
  'created_at',
] as const;

/**
 * JSON with the keys of every object sorted (by UTF-16 code unit, as
 * Array.prototype.sort does) and no spacing: the same content always gives the
 * same bytes, whatever order PostgreSQL or a client put the keys in.
 */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value ?? null);
}

/** SHA-256 (hex) of the canonical JSON of the signed fields of an experiment version. */
export function contentHash(row: RecordJson): string {
  const signed = Object.fromEntries(SIGNED_FIELDS.map((k) => [k, row[k] ?? null]));
  return createHash('sha256').update(canonicalJson(signed)).digest('hex');
}
