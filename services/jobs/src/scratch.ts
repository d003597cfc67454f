import { mkdir, mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';

/** Under the artifact directory: staged tables are as large as the artifact they become, and belong on the same disk. */
export const SCRATCH_DIR = '.scratch';

/**
 * Runs `fn` with a working directory of its own for one job, removed when `fn`
 * ends however it ends (success, failure, the worker stopping or losing the job).
 */
export async function withScratch<T>(root: string, jobId: string, fn: (dir: string) => Promise<T>): Promise<T> {
  const parent = join(root, SCRATCH_DIR);
  await mkdir(parent, { recursive: true });
  // A worker that died mid-run could not clean up; the job is held by this run now, so its earlier attempts' files are garbage.
  for (const name of await readdir(parent)) {
    if (name.startsWith(`${jobId}-`)) await rm(join(parent, name), { recursive: true, force: true });
  }
  const dir = await mkdtemp(join(parent, `${jobId}-`));
  try {
    return await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Scratch directories younger than this are left alone by the sweep (a run may have just made one). */
const SWEEP_MIN_AGE_MS = 10 * 60_000;

/**
 * Removes what runs left behind in the scratch folder when their worker died:
 * withScratch cleans up a job's leftovers when the job runs again, but a job
 * that died on its last attempt, or was declared dead by the reaper, never does.
 * A directory is kept while its job is running (it may be in use). The folder is
 * listed before the jobs are asked about, so a run that starts in between made
 * its directory after the listing and is not touched.
 */
export async function sweepScratch(root: string, running: (jobIds: string[]) => Promise<Set<string>>): Promise<number> {
  const parent = join(root, SCRATCH_DIR);
  const names = await readdir(parent).catch(() => [] as string[]);
  const now = Date.now();
  const old: string[] = [];
  for (const name of names) {
    const s = await stat(join(parent, name)).catch(() => undefined);
    if (s && now - s.mtimeMs > SWEEP_MIN_AGE_MS) old.push(name);
  }
  if (!old.length) return 0;
  // <job id>-<mkdtemp suffix>; a job id is a UUID
  const inUse = await running([...new Set(old.map((n) => n.slice(0, 36)))]);
  let removed = 0;
  for (const name of old) {
    if (inUse.has(name.slice(0, 36))) continue;
    await rm(join(parent, name), { recursive: true, force: true });
    removed++;
  }
  return removed;
}
