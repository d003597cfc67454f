import type { z } from 'zod';
import { DomainError } from '@lab/kit';

/** Parses input or throws 400 validation_failed naming each bad field. */
export function parseWith<S extends z.ZodType>(schema: S, input: unknown, message = 'invalid request'): z.infer<S> {
  const r = schema.safeParse(input);
  if (r.success) return r.data;
  throw DomainError.invalid(message, {
    fields: r.error.issues.map((i) => ({ path: i.path.join('.'), message: i.message })),
  });
}

/**
 * Parses a request body whose fields may all be left out: no body at all is taken
 * as `{}`, but a body that is there must be what the schema says, so a literal
 * JSON `null` (or an array, or a scalar) is refused like any other wrong body.
 */
export function parseBody<S extends z.ZodType>(schema: S, body: unknown, message = 'invalid request body'): z.infer<S> {
  return parseWith(schema, body === undefined ? {} : body, message);
}
