import type { Readable } from 'node:stream';
import type { FileStore } from '@lab/kit';
import PDFDocument from 'pdfkit';
import { ZipFile } from 'yazl';

export interface Artifact {
  /** the artifact's key in the artifact store, e.g. <org>/<job>.pdf */
  path: string;
  meta: { size: number; sha256: string; content_type: string; pages?: number; rows?: number; files?: string[] };
}

/**
 * Streams an artifact into the store as it is produced (hashed and counted on the
 * way); the store makes it readable only once complete, so a reader never sees
 * half an artifact.
 */
async function store(files: FileStore, path: string, source: Readable): Promise<{ size: number; sha256: string }> {
  const { size, sha256 } = await files.put(path, source);
  return { size, sha256 };
}

export type Pdf = PDFKit.PDFDocument;

/** A PDF built by `draw`; its Title metadata is the document title. */
export async function writePdf(files: FileStore, path: string, title: string, draw: (doc: Pdf) => void | Promise<void>): Promise<Artifact> {
  // Pages are not buffered: each is written out when the next begins, so a long report holds one page, not all of them.
  const doc = new PDFDocument({ size: 'A4', margin: 50, info: { Title: title, Creator: 'lab notebook service' } });
  const stored = store(files, path, doc);
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
export async function writeZip(files: FileStore, path: string, entries: ZipEntry[], rows: number): Promise<Artifact> {
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
  const s = await store(files, path, out).catch((err: unknown) => {
    throw failure ?? err;
  });
  return { path, meta: { ...s, content_type: 'application/zip', rows, files: entries.map((e) => e.name) } };
}
