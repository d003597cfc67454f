import type { z } from 'zod';
import { parseWith as kitParseWith } from '@lab/kit';

/**
 * Parses input or throws 400 validation_failed naming each bad field, in the
 * same words as every service (kit's one formatter of validation problems).
 */
export function parseWith<S extends z.ZodType>(schema: S, input: unknown, message = 'invalid request'): z.infer<S> {
  return kitParseWith(schema, input, message);
}

/**
 * Parses a request body whose fields may all be left out: no body at all is taken
 * as `{}`, but a body that is there must be what the schema says, so a literal
 * JSON `null` (or an array, or a scalar) is refused like any other wrong body.
 */
export function parseBody<S extends z.ZodType>(schema: S, body: unknown, message = 'invalid request body'): z.infer<S> {
  return parseWith(schema, body === undefined ? {} : body, message);
}
