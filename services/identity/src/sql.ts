import { sql, type SQL } from 'drizzle-orm';

/** A timestamp rendered by PostgreSQL as UTC ISO 8601, identical on pg and PGlite. */
export const iso = (column: SQL): SQL => sql`to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
