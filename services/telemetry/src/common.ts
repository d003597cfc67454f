import { sql, type SQL } from 'drizzle-orm';
import { z } from 'zod';
import { DomainError, isGuid, isoTimestamp, parseWith, structBody, type CallerContext } from '@lab/kit';
import type { telemetry } from '@lab/contracts';

/** The caller's organisation; every statement of this service filters by it. */
export function orgOf(caller: CallerContext): string {
  if (!caller.org_id) throw DomainError.forbidden('the call names no organisation', 'org_required');
  return caller.org_id;
}

/** A body (a Struct, as the client gave it) validated with zod: 400 validation_failed naming every bad field. */
export const parseBody = <S extends z.ZodType>(schema: S, body: Record<string, unknown> | undefined): z.infer<S> => parseWith(schema, structBody(body));

/** A query map validated with zod (unknown keys are refused by .strict()). */
export const parseQuery = <S extends z.ZodType>(schema: S, query: Record<string, string>): z.infer<S> => parseWith(schema, query);

/** An id from the path: one that is not a UUID cannot name a record of the org (404). */
export function idOf(id: string, what = 'record'): string {
  if (!isGuid(id)) throw DomainError.notFound(`${what} not found`);
  return id.toLowerCase();
}

export const uuid = z
  .string()
  .refine(isGuid, 'must be a UUID')
  .transform((s) => s.toLowerCase());
export const text = (max: number) => z.string().trim().min(1).max(max);
export const dateTime = isoTimestamp();
export const finite = z.number().refine(Number.isFinite, 'must be a finite number');
/** Free-form object, bounded so one record cannot grow without limit. */
export const freeObject = z.record(z.string(), z.unknown()).refine((o) => JSON.stringify(o).length <= 64 * 1024, 'must be at most 64 KiB as JSON');

export const limitParam = (def: number, max: number) => z.coerce.number().int().min(1).max(max).default(def);
export const offsetParam = z.coerce.number().int().min(0).max(1_000_000).default(0);

/** `and`-joins optional conditions (always at least the organisation filter). */
export const where = (conds: (SQL | undefined)[]): SQL =>
  sql.join(
    conds.filter((c): c is SQL => c !== undefined),
    sql` and `,
  );

/** The answer of a call that created a record (201): the record as stored. */
export const createdAnswer = (item: telemetry.ItemResponse['item']): telemetry.ItemResponse => ({ item, created: true });

/** A row or an aggregate PostgreSQL rendered as JSON text, parsed. */
export const parsed = (json: string): Record<string, unknown> => JSON.parse(json) as Record<string, unknown>;

/** An aggregate of rows (json_agg) PostgreSQL rendered as JSON text, parsed. */
export const parsedList = (json: string): Record<string, unknown>[] => JSON.parse(json) as Record<string, unknown>[];
