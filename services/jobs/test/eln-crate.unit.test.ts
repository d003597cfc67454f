import { ZipFile } from 'yazl';
import { DomainError } from '@lab/kit';
import { readCrate } from '../src/eln/crate-reader';

/** Names a ZIP may carry that the e2e test does not send: Windows separators and drives, a name at the top. */
function zipOf(entries: { name: string; content: string }[]): Promise<Buffer> {
  const zip = new ZipFile();
  for (const e of entries) zip.addBuffer(Buffer.from(e.content), e.name);
  zip.end();
  return new Promise((resolve) => {
    const parts: Buffer[] = [];
    zip.outputStream.on('data', (p: Buffer) => parts.push(p));
    zip.outputStream.on('end', () => resolve(Buffer.concat(parts)));
  });
}

/** Same-length replacement in the archive's bytes (yazl refuses to write such names). */
const patched = (b: Buffer, from: string, to: string) => {
  const out = Buffer.from(b);
  for (let i = out.indexOf(from); i !== -1; i = out.indexOf(from, i + 1)) out.write(to, i, 'latin1');
  return out;
};

const META = JSON.stringify({
  '@graph': [
    { '@id': 'ro-crate-metadata.json', about: { '@id': './' } },
    { '@id': './', '@type': 'Dataset' },
  ],
});
const meta = { name: 'crate/ro-crate-metadata.json', content: META };

async function refusal(bytes: Buffer): Promise<string> {
  const err = await readCrate(bytes).then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(err instanceof DomainError)) throw new Error(`expected a refusal, got ${String(err)}`);
  return err.code;
}

describe('readCrate', () => {
  it('reads a sound archive: its root folder, files under it, the graph', async () => {
    const crate = await readCrate(await zipOf([meta, { name: 'crate/e/a.txt', content: 'a' }]));
    expect(crate.root).toBe('crate');
    expect([...crate.files.keys()].sort()).toEqual(['e/a.txt', 'ro-crate-metadata.json']);
    expect(crate.graph.get('./')).toMatchObject({ '@type': 'Dataset' });
  });

  it.each([
    ['Windows separators climbing out', 'crate/xx_xx_evil', 'crate\\..\\..\\evil'],
    ['a drive letter', 'Q_/crate/evil', 'C:/crate/evil'],
  ])('refuses %s', async (_what, written, patchedName) => {
    const bytes = patched(await zipOf([meta, { name: written, content: 'x' }]), written, patchedName);
    expect(await refusal(bytes)).toBe('eln_unsafe_entry');
  });

  it('refuses a file at the top of the archive, outside any folder', async () => {
    expect(await refusal(await zipOf([meta, { name: 'loose.txt', content: 'x' }]))).toBe('eln_no_root_folder');
  });

  it('refuses an archive over the size an import takes, before opening it', async () => {
    expect(await refusal(Buffer.alloc(800 * 1024))).toBe('eln_too_large');
  });
});
