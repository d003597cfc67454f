import { z } from 'zod';

/** Building blocks of the OpenAPI document's schemas, shared by the modules that describe its parts. */
export type Json = Record<string, unknown>;

export const UUID = { type: 'string', format: 'uuid' };
export const TIME = { type: 'string', format: 'date-time' };

/** A reference to a schema of the document's components. */
export const schemaRef = (name: string) => ({ $ref: `#/components/schemas/${name}` });

/** The schema with null allowed (a type array; null also in its enum). */
export function nullableOf(s: Json): Json {
  if (s.type === undefined) return s.anyOf || s.oneOf || s.$ref ? { anyOf: [s, { type: 'null' }] } : s;
  const types: unknown[] = Array.isArray(s.type) ? s.type : [s.type];
  const out: Json = { ...s, type: types.includes('null') ? types : [...types, 'null'] };
  if (Array.isArray(s.enum) && !s.enum.includes(null)) out.enum = [...(s.enum as unknown[]), null];
  return out;
}

/** A zod schema as an OpenAPI 3.1 (JSON Schema 2020-12) schema of what a client sends. */
export function jsonSchemaOf(schema: z.ZodType): Json {
  const s = z.toJSONSchema(schema, { io: 'input', target: 'draft-2020-12', unrepresentable: 'any' }) as Json;
  delete s.$schema;
  return markSecrets(typeArrays(s)) as Json;
}

const isNullSchema = (x: unknown) => !!x && typeof x === 'object' && (x as Json).type === 'null' && Object.keys(x).length === 1;

/**
 * `anyOf: [X, {type: null}]` (zod's nullable) as X with a type array, the 3.1
 * way generators read best: `type: [string, null]` (null added to an enum too).
 * X without a plain type (a $ref, another anyOf) keeps the anyOf.
 */
function typeArrays(x: unknown): unknown {
  if (Array.isArray(x)) return x.map(typeArrays);
  if (!x || typeof x !== 'object') return x;
  const o: Json = Object.fromEntries(Object.entries(x as Json).map(([k, v]) => [k, typeArrays(v)]));
  const alts = o.anyOf;
  if (Array.isArray(alts) && alts.length === 2 && alts.some(isNullSchema)) {
    const other = alts.find((a) => !isNullSchema(a)) as Json | undefined;
    if (typeof other?.type === 'string') {
      const { anyOf: _anyOf, ...rest } = o;
      return { ...rest, ...nullableOf(other) };
    }
  }
  return o;
}

/** Passwords and secrets a client sends are never answered: writeOnly. */
function markSecrets(x: unknown): unknown {
  if (Array.isArray(x)) return x.map(markSecrets);
  if (!x || typeof x !== 'object') return x;
  const o = x as Json;
  if (o.properties && typeof o.properties === 'object') {
    const props = o.properties as Record<string, Json>;
    for (const k of Object.keys(props)) {
      props[k] = markSecrets(props[k]) as Json;
      if (/password|secret/.test(k) && typeof props[k] === 'object') props[k] = { ...props[k], writeOnly: true };
    }
  }
  for (const k of ['items', 'anyOf', 'oneOf', 'allOf']) if (o[k]) o[k] = markSecrets(o[k]);
  return o;
}
