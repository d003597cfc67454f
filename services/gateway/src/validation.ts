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
