/**
 * Which statement texts become prepared statements (named: parsed once per
 * session, their plans cached), on both backends: PostgreSQL's connections
 * (db.ts) and the embedded engine's one session (embedded-engine-thread.ts). A
 * module of its own, without drizzle or pg, because the engine's thread loads it.
 */

/** The mark of a point read (db.ts POINT_READ): what a query begins with to share a connection. */
export const POINT_READ_TEXT = '/* point read */';
/** The mark of a statement planned on every call (db.ts PLANNED_PER_CALL): never named. */
export const PLANNED_PER_CALL_TEXT = '/* planned per call */';

/** Statements that can be prepared: one DML or query statement, never DDL or BEGIN (a point read's mark before it). */
const PREPARABLE = new RegExp(`^\\s*(?:${POINT_READ_TEXT.replace(/[*/]/g, '\\$&')}\\s*)?(select|insert|update|delete|with)\\b`, 'i');
/**
 * Named statements live on each server connection (with their cached plans), so
 * their number is bounded: past it, new texts run unnamed, parsed every time.
 */
const MAX_PREPARED = 256;
/** Texts seen once; cleared when full, so one-off texts cannot grow it without bound. */
const MAX_SEEN = 2048;

/**
 * Gives the statement texts a process sends repeatedly a name, which makes them
 * prepared statements: PostgreSQL parses and plans each once per connection
 * instead of on every call (measured here: its CPU per request on the read path
 * fell by half). A text becomes named the second time it is seen, so that
 * statements built with literals run once do not take the slots.
 */
export class StatementNames {
  private readonly seen = new Set<string>();
  private readonly names = new Map<string, string>();

  nameFor(text: string): string | undefined {
    const named = this.names.get(text);
    if (named !== undefined || this.names.size >= MAX_PREPARED || !PREPARABLE.test(text) || text.startsWith(PLANNED_PER_CALL_TEXT)) return named;
    if (!this.seen.has(text)) {
      if (this.seen.size >= MAX_SEEN) this.seen.clear();
      this.seen.add(text);
      return undefined;
    }
    this.seen.delete(text);
    const name = `lab_${this.names.size}`;
    this.names.set(text, name);
    return name;
  }
}

/**
 * What a query config is given as its statement name: with prepared statements,
 * the parameterised statements seen repeatedly get one (StatementNames; those
 * without parameters are left alone: they may hold several commands, which a
 * prepared statement cannot); without, none at all, a name given by the caller
 * (drizzle's `.prepare(name)`) dropped too, so nothing can reach a pooler that
 * would send it to a server connection that never prepared it.
 */
export function statementNaming(preparedStatements: boolean): (config: { text?: unknown; name?: unknown }, values: unknown) => string | undefined {
  if (!preparedStatements) return () => undefined;
  const names = new StatementNames();
  return (c, values) => {
    if (c.name !== undefined) return c.name as string;
    return typeof c.text === 'string' && Array.isArray(values) && values.length > 0 ? names.nameFor(c.text) : undefined;
  };
}
