import { createReadStream } from 'node:fs';
import { open, rm, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { cell, widen } from './csv.js';

type Rec = Record<string, unknown>;

/** The CSV pass writes in chunks of about this many characters: few writes, little memory. */
const CHUNK = 64 * 1024;

/** A record as an element of a pretty-printed array: JSON.stringify(records, null, 2) nests each one level deeper. */
const element = (r: unknown): string => ((JSON.stringify(r, null, 2) as string | undefined) ?? 'null').replace(/\n/g, '\n  ');

/**
 * One export table written to disk a page at a time, so a table of any size
 * costs the memory of one page: <name>.json holds the bytes
 * JSON.stringify(records, null, 2) gives, <name>.csv RFC 4180 with the union
 * of the records' keys (first seen first) as header.
 *
 * The CSV header is the union of all records' keys, known only at the end, so
 * the first pass renders each row with the columns known so far into a side
 * file, and `finish` writes header and rows (widened to the final columns).
 * Rows are rendered from the records as read, not from a JSON round trip, so
 * values JSON would change (undefined, say) give the same cells as before.
 */
export class TableFile {
  readonly json: string;
  readonly csv: string;
  private readonly rowsFile: string;
  private readonly keys: string[] = [];
  private readonly known = new Set<string>();
  private jsonOut?: FileHandle;
  private rowsOut?: FileHandle;
  private records = 0;

  private constructor(dir: string, name: string) {
    this.json = join(dir, `${name}.json`);
    this.csv = join(dir, `${name}.csv`);
    this.rowsFile = join(dir, `${name}.rows`);
  }

  /** Opens the files of table `name` in `dir`; `close` it whatever happens. */
  static async create(dir: string, name: string): Promise<TableFile> {
    const t = new TableFile(dir, name);
    try {
      t.jsonOut = await open(t.json, 'ax');
      t.rowsOut = await open(t.rowsFile, 'ax');
    } catch (err) {
      await t.close();
      throw err;
    }
    return t;
  }

  get count(): number {
    return this.records;
  }

  async append(page: Rec[]): Promise<void> {
    if (!this.jsonOut || !this.rowsOut) throw new Error('table file is closed');
    if (!page.length) return;
    let json = '';
    let rows = '';
    for (const r of page) {
      json += (this.records++ === 0 ? '[\n  ' : ',\n  ') + element(r);
      for (const k of Object.keys(r)) {
        if (!this.known.has(k)) {
          this.known.add(k);
          this.keys.push(k);
        }
      }
      // JSON keeps a row on one line of the side file, whatever CR/LF its quoted cells hold
      rows += `${JSON.stringify([this.keys.length, this.keys.map((k) => cell(r[k])).join(',')])}\n`;
    }
    // appendFile writes all of it (a bare write may write part)
    await this.jsonOut.appendFile(json);
    await this.rowsOut.appendFile(rows);
  }

  /** Ends the JSON array and writes the CSV. */
  async finish(): Promise<void> {
    if (!this.jsonOut || !this.rowsOut) throw new Error('table file is closed');
    await this.jsonOut.appendFile(this.records ? '\n]' : '[]');
    await this.close();
    const out = await open(this.csv, 'ax');
    try {
      const total = this.keys.length;
      let buf = `${this.keys.map(cell).join(',')}\r\n`;
      for await (const line of lines(this.rowsFile)) {
        const [width, row] = JSON.parse(line) as [number, string];
        buf += `${widen(row, width, total)}\r\n`;
        if (buf.length >= CHUNK) {
          await out.appendFile(buf);
          buf = '';
        }
      }
      await out.appendFile(buf);
    } finally {
      await out.close();
    }
    await rm(this.rowsFile, { force: true });
  }

  /** Releases the open files (the caller removes the directory). */
  async close(): Promise<void> {
    const handles = [this.jsonOut, this.rowsOut];
    this.jsonOut = this.rowsOut = undefined;
    await Promise.all(handles.flatMap((h) => (h ? [h.close().catch(() => undefined)] : [])));
  }
}

/** The lines of a file, read a chunk at a time (readline's iterator may read ahead of its consumer). */
async function* lines(path: string): AsyncGenerator<string> {
  let rest = '';
  for await (const chunk of createReadStream(path, { encoding: 'utf8' })) {
    const parts = (rest + (chunk as string)).split('\n');
    rest = parts.pop()!;
    yield* parts;
  }
  if (rest) yield rest;
}
