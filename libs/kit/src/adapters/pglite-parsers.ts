import { types as pgliteTypes, type PGlite, type QueryOptions } from '@electric-sql/pglite';

/**
 * The types whose text drizzle-orm 0.45.4's PGlite session asks to be given as it
 * comes (`parsers` of every query it sends: each maps the text to itself), so that
 * it maps dates and arrays of them itself, as on node-postgres.
 */
const DRIZZLE_RAW_TYPES: ReadonlySet<number> = new Set([
  pgliteTypes.TIMESTAMP,
  pgliteTypes.TIMESTAMPTZ,
  pgliteTypes.INTERVAL,
  pgliteTypes.DATE,
  1231, // numeric[]
  1115, // timestamp[]
  1185, // timestamptz[]
  1187, // interval[]
  1182, // date[]
]);

const asText = (value: string): string => value;

/** Gives a PGlite instance drizzle's nine parsers as its own (see adapters/drizzle.ts, pgliteClientForDrizzle). */
export function giveDrizzleParsers(lite: PGlite): void {
  for (const type of DRIZZLE_RAW_TYPES) lite.parsers[type] = asText;
}

/** The options of a query without its `parsers`, when they are only the ones the instance already has. */
export function withoutKnownParsers(options: QueryOptions | undefined): QueryOptions | undefined {
  const parsers = options?.parsers;
  if (!parsers) return options;
  for (const type of Object.keys(parsers)) if (!DRIZZLE_RAW_TYPES.has(Number(type))) return options;
  const { parsers: _known, ...rest } = options;
  return rest;
}
