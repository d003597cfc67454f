#!/usr/bin/env node
/**
 * Copies the files a service kept in a directory (TELEMETRY_STORAGE_DIR,
 * JOBS_ARTIFACT_DIR) into its schema's file store, for a switch to the database
 * store (docs/operations.md, "Files in the database"). Every file under the
 * directory goes in under its path relative to the directory, which is its key
 * (a raw file's storage_key, a job's result_path); temporary files of writes
 * (`*.part`), a jobs directory's `.scratch` and the old `tmp` folder are left
 * out. A key the database holds already is skipped, so a run stopped half-way
 * is simply run again. Nothing is deleted: remove the directory (the volume) once
 * the service has run on the database for a while.
 *
 *   DATABASE_URL=postgres://... node scripts/move-files-into-database.mjs <schema> <directory>
 *
 * <schema> is telemetry or jobs, the URL that service's own. Needs the build
 * (npm run build) and the service's migrations applied (its tables).
 */
import { readdir } from 'node:fs/promises';
import { join, relative, sep } from 'node:path';
import { DirectoryFileStore, openDatabase, PgFileStore } from '@lab/kit';

const [schema, dir] = process.argv.slice(2);
if (!['telemetry', 'jobs'].includes(schema ?? '') || !dir || !process.env.DATABASE_URL) {
  console.error('usage: DATABASE_URL=postgres://... node scripts/move-files-into-database.mjs telemetry|jobs <directory>');
  process.exit(2);
}
const from = new DirectoryFileStore(dir);
const db = await openDatabase({ url: process.env.DATABASE_URL, poolSize: 2, name: `move-files-${schema}` });
const to = new PgFileStore(db, schema);
const left = (key) => key.endsWith('.part') || key.split('/').some((s) => s.startsWith('.')) || key.startsWith('tmp/');
let moved = 0;
let skipped = 0;
let bytes = 0;
try {
  for (const entry of await readdir(from.root, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const key = relative(from.root, join(entry.parentPath, entry.name)).split(sep).join('/');
    if (left(key) || (await to.holds(key))) {
      skipped++;
      continue;
    }
    const file = await from.open(key);
    if (!file) continue; // removed since the listing
    const stored = await to.put(key, file.stream);
    moved++;
    bytes += stored.size;
    console.log(`${key}: ${stored.size} bytes, sha256 ${stored.sha256}`);
  }
} finally {
  await db.close();
}
console.log(`moved ${moved} file(s), ${(bytes / 1024 / 1024).toFixed(1)} MiB; skipped ${skipped} (temporary, or in the database already)`);
