import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PDFDocument } from 'pdf-lib';
import { DirectoryFileStore } from '@lab/kit';
import { writePdf, writeZip } from '../src/artifacts';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'lab-artifacts-unit-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('writePdf', () => {
  it.each([
    ['one page', 1, false],
    ['pages added by flowing text', 400, false],
    ['pages added explicitly', 3, true],
  ])('counts the pages without buffering them: %s', async (_n, lines, explicit) => {
    const a = await writePdf(new DirectoryFileStore(dir), `pdf-${lines}-${explicit}.pdf`, 'Pages', (doc) => {
      for (let i = 0; i < lines; i++) {
        if (explicit) doc.addPage();
        doc.text(`line ${i}`);
      }
    });
    const pdf = await PDFDocument.load(await readFile(join(dir, a.path)));
    expect(a.meta.pages).toBe(pdf.getPageCount());
    if (lines > 1) expect(a.meta.pages).toBeGreaterThan(1);
  });
});

describe('writeZip', () => {
  it('fails, leaving nothing behind, when a file to add cannot be read', async () => {
    const present = join(dir, 'present.txt');
    await writeFile(present, 'x');
    await expect(
      writeZip(
        new DirectoryFileStore(dir),
        'out/broken.zip',
        [
          { name: 'a.txt', content: 'a' },
          { name: 'present.txt', file: present },
          { name: 'gone.txt', file: join(dir, 'gone.txt') },
        ],
        0,
      ),
    ).rejects.toMatchObject({ code: 'ENOENT' });
    expect(await readdir(join(dir, 'out'))).toEqual([]);
  });
});
