/**
 * The vocabulary of an .eln archive (The ELN Consortium's file format: a ZIP
 * with one root folder holding an RO-Crate 1.1 `ro-crate-metadata.json`), shared
 * by the export that writes it and the import that reads it.
 */
export const ELN_MEDIA_TYPE = 'application/vnd.eln+zip';
export const METADATA_FILE = 'ro-crate-metadata.json';
export const RO_CRATE_CONTEXT = 'https://w3id.org/ro/crate/1.1/context';
export const RO_CRATE_CONFORMS_TO = 'https://w3id.org/ro/crate/1.1';
/** The version of the ELN file format the archive follows, on the metadata descriptor and the root dataset. */
export const ELN_FORMAT_VERSION = '1.0';
export const PUBLISHER_ID = '#publisher';

/** What this product marks its datasets with (`additionalType`), to read its own archives back exactly. */
export const KIND = { experiment: 'Experiment', sample: 'Sample', project: 'Project' } as const;

export type Entity = Record<string, unknown> & { '@id': string };

export const ref = (id: string) => ({ '@id': id });

/** The @id of each reference in a property (one reference, a list, or bare strings as some ELNs write them). */
export function refIds(v: unknown): string[] {
  const list = Array.isArray(v) ? (v as unknown[]) : v === undefined || v === null ? [] : [v];
  const out: string[] = [];
  for (const x of list) {
    if (typeof x === 'string') out.push(x);
    else if (x && typeof x === 'object' && typeof (x as Entity)['@id'] === 'string') out.push((x as Entity)['@id']);
  }
  return out;
}

/** The entity's types: `@type` is a string or a list of strings. */
export function typesOf(e: Record<string, unknown>): string[] {
  const t = e['@type'];
  return (Array.isArray(t) ? (t as unknown[]) : [t]).filter((x): x is string => typeof x === 'string');
}

/** A data entity's @id as a path under the root folder: `./a/b/` and `a/b` are the same folder. */
export function pathOfId(id: string): string {
  let p = id;
  try {
    p = decodeURIComponent(p);
  } catch {
    // an @id that is not percent-encoded as a URI is taken as it is written
  }
  return p.replace(/^\.\//, '').replace(/\/+$/, '');
}
