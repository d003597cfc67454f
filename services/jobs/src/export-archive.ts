import { DomainError } from '@lab/kit';
import { writeZip, type Artifact, type ZipEntry } from './artifacts.js';
import type { JobType } from './job-types.js';
import type { JobRun } from './reports.js';
import { withScratch } from './scratch.js';
import type { Rec } from './sources.js';
import { TableFile } from './table-file.js';

export type Pages = AsyncIterable<Rec[]>;
/** A table of an export: its name and how to read its records, a page at a time. */
export type TableSource = [name: string, read: () => Pages];

const tooLarge = (max: number) =>
  new DomainError(
    'too_large',
    'export_too_large',
    `the export has more than ${max} records, the most one export may hold (JOBS_EXPORT_MAX_RECORDS); no partial export was produced`,
  );

/**
 * The ZIP of an export: manifest.json, then <table>.json and <table>.csv per
 * table. Tables are read one after another, each written to the job's scratch
 * directory as its pages arrive, and the ZIP is made from those files: memory
 * holds a page, never a table. More than run.maxExportRecords records in all
 * fail the job; an incomplete export is never produced.
 */
export async function exportTables(run: JobRun, jobType: JobType, tables: TableSource[], from = 5, to = 80): Promise<Artifact> {
  return withScratch(run.dir, run.jobId, async (dir) => {
    const counts: Record<string, number> = {};
    const files: ZipEntry[] = [];
    let rows = 0;
    for (const [i, [name, read]] of tables.entries()) {
      await run.step(from + Math.round(((to - from) * i) / tables.length), `loading ${name}`);
      const table = await TableFile.create(dir, name);
      try {
        for await (const page of read()) {
          run.checkpoint();
          rows += page.length;
          if (rows > run.maxExportRecords) throw tooLarge(run.maxExportRecords);
          await table.append(page);
        }
        await table.finish();
      } finally {
        await table.close();
      }
      counts[name] = table.count;
      files.push({ name: `${name}.json`, file: table.json }, { name: `${name}.csv`, file: table.csv });
    }
    await run.step(85, 'writing the archive');
    const manifest = { job_id: run.jobId, job_type: jobType, org_id: run.caller.org_id, generated_at: new Date().toISOString(), tables: counts };
    return writeZip(run.files, `${run.base}.zip`, [{ name: 'manifest.json', content: JSON.stringify(manifest, null, 2) }, ...files], rows);
  });
}
