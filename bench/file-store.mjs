// Throughput and memory of the kit's file stores (libs/kit/src/file-store.ts) with
// 50 MiB files, in this process (no service around them): PgFileStore on the
// PostgreSQL server of DATABASE_URL (a fresh database, dropped after), PgFileStore
// on PGlite (a temporary data directory) and DirectoryFileStore (a temporary
// directory). Each store writes a 50 MiB file from a stream of 64 KiB pieces (as an
// upload arrives) BENCH_FILES times and reads each back, checking size and SHA-256.
// Prints MiB/s of the writes and reads (median), and the RSS: before, its peak while
// writing and reading, after. Needs the build (npm run build); run it with the
// stack's Node.js (npm exec -- node bench/file-store.mjs). BENCH_STORES picks
// stores (postgres,pglite,filesystem): one at a time gives each store's RSS alone,
// as the stores run one after another in this process.
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { DirectoryFileStore, newId, openDatabase, PgFileStore } from '@lab/kit';
import { saveResult } from './results.mjs';

const MiB = 1024 * 1024;
const FILE_BYTES = 50 * MiB;
const FILES = Number(process.env.BENCH_FILES ?? 3);
const STORES = (process.env.BENCH_STORES ?? 'postgres,pglite,filesystem').split(',');
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const mib = (b) => +(b / MiB).toFixed(1);

// one random 1 MiB block, given again and again in 64 KiB pieces: the source costs nothing to make
const block = randomBytes(MiB);
async function* source() {
  for (let at = 0; at < FILE_BYTES; at += 64 * 1024) yield block.subarray(at % MiB, (at % MiB) + 64 * 1024);
}
const expected = (() => {
  const h = createHash('sha256');
  for (let i = 0; i < FILE_BYTES / MiB; i++) h.update(block);
  return h.digest('hex');
})();

let peak = 0;
const sample = () => (peak = Math.max(peak, process.memoryUsage.rss()));
// PGlite runs its statements on this thread: the timer's samples may all fall between them, hence also one after each step
const sampler = setInterval(sample, 20);

async function tablesIn(db) {
  const ddl = await readFile(new URL('../services/jobs/migrations/007_stored_files.sql', import.meta.url), 'utf8');
  await db.rawTx(async (raw) => {
    await raw.exec('create schema if not exists bench');
    await raw.exec(ddl.replaceAll('jobs.', 'bench.'));
  });
}

async function measure(name, store) {
  const writes = [];
  const reads = [];
  const before = process.memoryUsage.rss();
  peak = before;
  for (let i = 0; i < FILES; i++) {
    const key = `bench/${newId()}.bin`;
    let t = performance.now();
    const stored = await store.put(key, source());
    sample();
    writes.push(FILE_BYTES / MiB / ((performance.now() - t) / 1000));
    if (stored.size !== FILE_BYTES || stored.sha256 !== expected) throw new Error(`${name}: stored ${stored.size} bytes, ${stored.sha256}`);
    t = performance.now();
    const f = await store.open(key);
    const h = createHash('sha256');
    let size = 0;
    for await (const b of f.stream) {
      h.update(b);
      size += b.length;
    }
    sample();
    reads.push(FILE_BYTES / MiB / ((performance.now() - t) / 1000));
    if (size !== FILE_BYTES || h.digest('hex') !== expected) throw new Error(`${name}: read ${size} bytes`);
    await store.remove([key]);
  }
  const after = process.memoryUsage.rss();
  const r = {
    store: name,
    write_mib_s: +median(writes).toFixed(1),
    read_mib_s: +median(reads).toFixed(1),
    writes_mib_s: writes.map((x) => +x.toFixed(1)),
    reads_mib_s: reads.map((x) => +x.toFixed(1)),
    rss_before_mib: mib(before),
    rss_peak_over_before_mib: mib(peak - before),
    rss_after_over_before_mib: mib(after - before),
  };
  console.log(
    `${name}: write ${r.write_mib_s} MiB/s (${r.writes_mib_s.join(', ')}), read ${r.read_mib_s} MiB/s (${r.reads_mib_s.join(', ')}); ` +
      `RSS ${r.rss_before_mib} MiB before, peak +${r.rss_peak_over_before_mib} MiB, after +${r.rss_after_over_before_mib} MiB`,
  );
  return r;
}

const results = [];
const work = await mkdtemp(join(tmpdir(), 'lab-bench-files-'));
try {
  for (const kind of STORES) {
    if (kind === 'filesystem') results.push(await measure('filesystem', new DirectoryFileStore(join(work, 'dir'))));
    if (kind === 'pglite') {
      const db = await openDatabase({ dataDir: join(work, 'pglite') });
      await tablesIn(db);
      results.push(await measure('pglite', new PgFileStore(db, 'bench')));
      await db.close();
    }
    if (kind === 'postgres') {
      if (!process.env.DATABASE_URL) {
        console.log('postgres: skipped (no DATABASE_URL)');
        continue;
      }
      const name = `lab_bench_files_${randomBytes(4).toString('hex')}`;
      const admin = new pg.Client({ connectionString: process.env.DATABASE_URL });
      await admin.connect();
      await admin.query(`create database ${name}`);
      const url = new URL(process.env.DATABASE_URL);
      url.pathname = `/${name}`;
      const db = await openDatabase({ url: url.toString(), poolSize: 2, name: 'bench-files' });
      try {
        await tablesIn(db);
        results.push(await measure('postgres', new PgFileStore(db, 'bench')));
      } finally {
        await db.close();
        await admin.query(`drop database ${name} with (force)`);
        await admin.end();
      }
    }
  }
} finally {
  clearInterval(sampler);
  await rm(work, { recursive: true, force: true });
}
saveResult('file-store', { scenario: 'file-store', file_bytes: FILE_BYTES, files: FILES, results });
