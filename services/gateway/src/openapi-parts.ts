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
