import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, rename, rm, stat } from 'node:fs/promises';
import { dirname, resolve, sep } from 'node:path';
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
  // Pages are not buffered: each is written out when the next begins, so a long report holds one page, not all of them.
  const doc = new PDFDocument({ size: 'A4', margin: 50, info: { Title: title, Creator: 'lab notebook service' } });
  const stored = store(dir, path, doc);
  // the constructor added the first page before a listener could be attached
  let pages = 1;
  doc.on('pageAdded', () => pages++);
  try {
    doc.fontSize(18).text(title, { underline: false });
    doc.moveDown(0.5).fontSize(10);
    await draw(doc);
  } finally {
    doc.end();
  }
  const s = await stored;
  return { path, meta: { ...s, content_type: 'application/pdf', pages } };
}

/** A file of a ZIP: given whole, or a file on disk read while the ZIP is written. */
export type ZipEntry = { name: string } & ({ content: string | Buffer } | { file: string });

/** A ZIP of named files; rows counts the data rows of its tables. */
export async function writeZip(dir: string, path: string, entries: ZipEntry[], rows: number): Promise<Artifact> {
  const zip = new ZipFile();
  // yazl's outputStream is a PassThrough (its types say only ReadableStream)
  // eslint-disable-next-line @typescript-eslint/no-unsafe-class-instance-assignment
  const out = zip.outputStream as Readable;
  // yazl reports a file it cannot read on the ZipFile, not on its output, and possibly before the store reads the
  // output: ending the output (without an error no one may be listening for yet) fails the store instead of leaving
  // it waiting, and the cause is what the caller sees.
  let failure: Error | undefined;
  zip.on('error', (err: Error) => {
    failure ??= err;
    out.destroy();
  });
  for (const e of entries) {
    if ('file' in e) zip.addFile(e.file, e.name, { mtime: new Date(), mode: 0o100664 });
    else zip.addBuffer(Buffer.isBuffer(e.content) ? e.content : Buffer.from(e.content, 'utf8'), e.name);
  }
  zip.end();
  const s = await store(dir, path, out).catch((err: unknown) => {
    throw failure ?? err;
  });
  return { path, meta: { ...s, content_type: 'application/zip', rows, files: entries.map((e) => e.name) } };
}
