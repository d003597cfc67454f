import type { DomainError } from './errors.js';

interface PgLikeError {
  code?: string;
  constraint?: string;
  message?: string;
  cause?: unknown;
}

/** Constraint name -> the client-facing error of the business rule it states. */
export type ConstraintRules = Record<string, () => DomainError>;

/**
 * The violated unique or check constraint's name (pg and PGlite errors, possibly
 * wrapped by drizzle). PGlite may leave `constraint` unset; then the rule names
 * are looked up in the message.
 */
export function violatedConstraint(err: unknown, known: string[] = []): string | undefined {
  for (let e = err as PgLikeError | undefined, depth = 0; e && depth < 5; e = e.cause as PgLikeError | undefined, depth++) {
    if (e.code !== '23505' && e.code !== '23514') continue;
    if (e.constraint) return e.constraint;
    return known.find((name) => e.message?.includes(`"${name}"`));
  }
  return undefined;
}

/**
 * Whether a write failed on a foreign key (pg and PGlite errors, possibly
 * wrapped): the row it points at was deleted by a transaction that committed
 * while this one waited on it. The caller answers what the missing row means
 * (usually 404), not a 500.
 */
export function isForeignKeyViolation(err: unknown): boolean {
  for (let e = err as PgLikeError | undefined, depth = 0; e && depth < 5; e = e.cause as PgLikeError | undefined, depth++) {
    if (e.code === '23503') return true;
  }
  return false;
}

/**
 * Wraps every handler of a gRPC service so that a write running into a rule's
 * constraint (the database has the last word under concurrency) answers the
 * rule's DomainError instead of a 500.
 */
export function withConstraintErrors<H extends object>(handlers: H, rules: ConstraintRules): H {
  const names = Object.keys(rules);
  const out: Record<string, unknown> = {};
  for (const [name, fn] of Object.entries(handlers) as [string, (...a: unknown[]) => Promise<unknown>][]) {
    out[name] = async (...args: unknown[]) => {
      try {
        return await fn(...args);
      } catch (err) {
        const rule = rules[violatedConstraint(err, names) ?? ''];
        throw rule ? rule() : err;
      }
    };
  }
  return out as H;
}
