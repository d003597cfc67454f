import { hasMzmlRoot, MZML_MAX_BYTES, RAW_FILE_MAX_BYTES, RawFileAllowance } from '../src/raw-file-limits';

describe('hasMzmlRoot', () => {
  it.each([
    ['<mzML xmlns="http://psi.hupo.org/ms/mzml">', true],
    ['<?xml version="1.0"?>\n<indexedmzML xmlns="http://psi.hupo.org/ms/mzml">', true],
    ['\uFEFF<?xml version="1.0"?><!-- by msconvert --><?pi x?>\n  <mzML>', true],
    ['<!DOCTYPE mzML><ms:mzML xmlns:ms="http://psi.hupo.org/ms/mzml">', true],
    ['<mzML/>', true],
    ['<?xml version="1.0"?><html><mzML>', false], // mzML inside another root
    ['<mzMLx>', false],
    ['mzML', false],
    ['', false],
    ['\x00\x01\x02binary', false],
  ])('%j: %s', (head, expected) => {
    expect(hasMzmlRoot(Buffer.from(head))).toBe(expected);
  });
});

describe('RawFileAllowance', () => {
  const chunks = (head: string, total: number) => {
    const first = Buffer.alloc(8192, 0x20);
    first.write(head);
    return [first, ...Array.from({ length: Math.ceil((total - first.length) / 65536) }, () => Buffer.alloc(65536))];
  };
  const limitOf = (a: RawFileAllowance, parts: Buffer[]) => parts.map((c) => a.limitAfter(c)).at(-1);

  it('25 MiB for a file that does not claim to be mzML, whatever it holds', () => {
    expect(limitOf(new RawFileAllowance('run.raw', 'application/octet-stream'), chunks('<mzML>', 100_000))).toBe(RAW_FILE_MAX_BYTES);
  });

  it('50 MiB for a file named or typed mzML whose content is mzML', () => {
    expect(limitOf(new RawFileAllowance('run.mzML', ''), chunks('<?xml version="1.0"?><mzML>', 100_000))).toBe(MZML_MAX_BYTES);
    expect(limitOf(new RawFileAllowance('upload', 'application/mzml+xml'), chunks('<indexedmzML>', 100_000))).toBe(MZML_MAX_BYTES);
  });

  it('25 MiB for a file named mzML whose content is not', () => {
    expect(limitOf(new RawFileAllowance('run.mzML', ''), chunks('PK\x03\x04 a zip', 100_000))).toBe(RAW_FILE_MAX_BYTES);
  });

  it('decides on the head even when it arrives a few bytes at a time', () => {
    const a = new RawFileAllowance('run.mzml', '');
    const text = Buffer.concat([Buffer.from('<?xml version="1.0"?>\n<mzML>'), Buffer.alloc(5000, 0x20)]);
    let limit = 0;
    for (let i = 0; i < text.length; i += 3) limit = a.limitAfter(text.subarray(i, i + 3));
    expect(limit).toBe(MZML_MAX_BYTES);
  });
});
