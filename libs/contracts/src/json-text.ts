/**
 * JSON text, whole or as the consecutive pieces it was written in.
 *
 * An answer of hundreds of records (an ingest of 500 readings is ~200 KB) is kept
 * in pieces of at most JSON_PIECE_CHARS up to the socket, where they are copied
 * into one buffer (the gateway's replies). Joined into one string, it would be a
 * V8 large object (over 128 KiB): allocated on fresh pages every time and freed
 * with them, about 50 page faults per 200 KB. On the virtual machines we measured,
 * a page fault costs ~20 us: the gateway took 184 faults per ingest answer, about
 * half of its CPU per batch (docs/benchmarks.md).
 */
export type JsonText = string | readonly string[];

/** Pieces stay well under V8's large-object size (128 KiB) once flattened. */
export const JSON_PIECE_CHARS = 32 * 1024;

/** The text of a JsonText as one string: for small answers, tests and logs. */
export const jsonString = (t: JsonText): string => (typeof t === 'string' ? t : t.join(''));

/**
 * Writes JSON text piece by piece, cutting a new piece once the current one
 * reaches JSON_PIECE_CHARS. Appends make V8 cons strings (no copy); each piece is
 * flattened on its own when it is written out.
 */
export class JsonWriter {
  private readonly pieces: string[] = [];
  private current = '';

  add(text: string): this {
    this.current += text;
    if (this.current.length >= JSON_PIECE_CHARS) {
      this.pieces.push(this.current);
      this.current = '';
    }
    return this;
  }

  /** A JSON array of the items as `one` writes them. */
  array<T>(list: readonly T[], one: (x: T) => string): this {
    this.add('[');
    for (let k = 0; k < list.length; k++) this.add(k ? `,${one(list[k]!)}` : one(list[k]!));
    return this.add(']');
  }

  /** What was written: one string when it fits a piece, else the pieces. */
  text(): JsonText {
    if (!this.pieces.length) return this.current;
    return this.current ? [...this.pieces, this.current] : this.pieces;
  }
}

/** A JSON array of the items as `one` writes them, in pieces when it is large. */
export const jsonArray = <T>(list: readonly T[], one: (x: T) => string): JsonText => new JsonWriter().array(list, one).text();
