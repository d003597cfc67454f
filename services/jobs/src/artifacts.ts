import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, rename, rm, stat } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import PDFDocument from 'pdfkit';
import { ZipFile } from 'yazl';

export interface Artifact {
  /** path under the artifact directory, e.g. <org>/<job>.pdf */
  path: string;
  meta: { size: number; sha256: string; content_type: string; pages?: number; rows?: number; files?: string[] };
}

/** Resolves a stored result_path inside the artifact directory (never outside it). */
export function artifactFile(dir: string, path: string): string {
  const root = resolve(dir);
  const full = resolve(root, path);
  if (!full.startsWith(root + sep)) throw new Error('artifact path escapes the artifact directory');
  return full;
}

/**
 * Writes a stream to its final place atomically (temporary file, then rename),
 * hashing it on the way: a reader never sees half an artifact.
 */
async function store(dir: string, path: string, source: Readable): Promise<{ size: number; sha256: string }> {
  const file = artifactFile(dir, path);
  await mkdir(dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}.${Date.now()}.tmp`;
  const hash = createHash('sha256');
  const tap = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      hash.update(chunk);
      cb(null, chunk);
    },
  });
  try {
    await pipeline(source, tap, createWriteStream(tmp));
    await rename(tmp, file);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
  return { size: (await stat(file)).size, sha256: hash.digest('hex') };
}

export type Pdf = PDFKit.PDFDocument;

/** A PDF built by `draw`; its Title metadata is the document title. */
export async function writePdf(dir: string, path: string, title: string, draw: (doc: Pdf) => void | Promise<void>): Promise<Artifact> {
  const doc = new PDFDocument({ size: 'A4', margin: 50, bufferPages: true, info: { Title: title, Creator: 'lab notebook service' } });
  const stored = store(dir, path, doc as unknown as Readable);
  let pages = 0;
  try {
    doc.fontSize(18).text(title, { underline: false });
    doc.moveDown(0.5).fontSize(10);
    await draw(doc);
    pages = doc.bufferedPageRange().count;
  } finally {
    doc.end();
  }
  const s = await stored;
  return { path, meta: { ...s, content_type: 'application/pdf', pages } };
}

export interface ZipEntry {
  name: string;
  content: string | Buffer;
}

/** A ZIP of named files; rows counts the data rows of its tables. */
export async function writeZip(dir: string, path: string, entries: ZipEntry[], rows: number): Promise<Artifact> {
  const zip = new ZipFile();
  for (const e of entries) zip.addBuffer(Buffer.isBuffer(e.content) ? e.content : Buffer.from(e.content, 'utf8'), e.name);
  zip.end();
  const s = await store(dir, path, zip.outputStream as Readable);
  return { path, meta: { ...s, content_type: 'application/zip', rows, files: entries.map((e) => e.name) } };
}

const cell = (v: unknown): string => {
  if (v === null || v === undefined) return '';
  const s = typeof v === 'object' ? JSON.stringify(v) : String(v);
  // quotes doubled; a leading = + - @ is neutralised so spreadsheets do not run it as a formula
  const safe = typeof v === 'string' && /^[=+\-@]/.test(s) ? `'${s}` : s;
  return /[",\r\n]/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe;
};

/** RFC 4180 CSV with the union of the records' keys as header. */
export function toCsv(records: Record<string, unknown>[]): string {
  const keys: string[] = [];
  for (const r of records) for (const k of Object.keys(r)) if (!keys.includes(k)) keys.push(k);
  const lines = [keys.map(cell).join(',')];
  for (const r of records) lines.push(keys.map((k) => cell(r[k])).join(','));
  return `${lines.join('\r\n')}\r\n`;
}

/** The JSON and CSV files of one table. */
export const tableFiles = (name: string, records: Record<string, unknown>[]): ZipEntry[] => [
  { name: `${name}.json`, content: JSON.stringify(records, null, 2) },
  { name: `${name}.csv`, content: toCsv(records) },
];

export const joinPath = (...parts: string[]) => join(...parts).split(sep).join('/');
