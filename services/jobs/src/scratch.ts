import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
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
