import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { toCsv } from './csv-oracle';
import { TableFile } from '../src/table-file';

type Rec = Record<string, unknown>;

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'lab-table-file-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

let n = 0;
/** Writes `records` through a TableFile in pages of `pageSize`; returns what it left on disk. */
async function written(records: Rec[], pageSize: number) {
  const name = `t${n++}`;
  const t = await TableFile.create(dir, name);
  try {
    for (let i = 0; i < records.length; i += pageSize) await t.append(records.slice(i, i + pageSize));
    await t.finish();
  } finally {
    await t.close();
  }
  const left = (await readdir(dir)).filter((f) => f.startsWith(`${name}.`)).sort();
  return { count: t.count, json: await readFile(t.json, 'utf8'), csv: await readFile(t.csv, 'utf8'), left, name };
}

/** Deterministic pseudo-random numbers (a failure must reproduce). */
function random(seed: number) {
  return () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  };
}

describe('TableFile (the streaming writer of an export table)', () => {
  it('writes an empty table as [] and a CSV of an empty header line', async () => {
    const w = await written([], 3);
    expect(w.count).toBe(0);
    expect(w.json).toBe(JSON.stringify([], null, 2));
    expect(w.json).toBe('[]');
    expect(w.csv).toBe(toCsv([]));
    expect(w.left).toEqual([`${w.name}.csv`, `${w.name}.json`]);
  });

  it('gives the bytes of JSON.stringify(records, null, 2) and of toCsv for heterogeneous records across pages', async () => {
    const records: Rec[] = [
      {},
      { a: 'x,y', b: -2.5 },
      { only_undefined: undefined },
      { a: '=cmd()', c: { k: '"q"', nested: [1, { deep: null }], empty: {} }, d: [] },
      { b: 'line one\r\nline two\nthree\rfour', e: true, f: null },
      { e: false, g: '+1', h: '-x', i: '@sum', j: 'ünïcødé \u2028 \u2029 😀 tab\tend' },
      {},
      { late: 'a key first seen on a later page', a: 0 },
    ];
    for (const pageSize of [1, 2, 3, 100]) {
      const w = await written(records, pageSize);
      expect(w.count).toBe(records.length);
      expect(w.json).toBe(JSON.stringify(records, null, 2));
      expect(w.csv).toBe(toCsv(records));
    }
  });

  it('matches JSON.stringify and toCsv on many generated records larger than its write chunks', async () => {
    const rnd = random(42);
    const pick = <T>(xs: T[]): T => xs[Math.floor(rnd() * xs.length)]!;
    const values = [null, undefined, 0, -1.25, 1e21, true, 'plain', 'with "quotes", commas', 'multi\r\nline', '=1+1', { o: [1, 'two'] }, [], 'é'.repeat(40)];
    const keys = Array.from({ length: 30 }, (_, i) => `k${i}`);
    const records: Rec[] = Array.from({ length: 3_000 }, (_, i) => {
      const r: Rec = {};
      // the key set widens slowly, so rows are rendered under many different headers
      const reach = Math.min(keys.length, 1 + Math.floor(i / 100));
      for (let j = 0; j < 1 + Math.floor(rnd() * 6); j++) r[pick(keys.slice(0, reach))] = pick(values);
      return r;
    });
    const w = await written(records, 500);
    expect(w.json.length).toBeGreaterThan(64 * 1024);
    expect(w.json).toBe(JSON.stringify(records, null, 2));
    expect(w.csv).toBe(toCsv(records));
    // the side file of the CSV pass is gone
    expect(w.left).toEqual([`${w.name}.csv`, `${w.name}.json`]);
  });
});
