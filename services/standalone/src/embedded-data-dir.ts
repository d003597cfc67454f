import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { sql } from 'drizzle-orm';
import { openDatabase, type Logger } from '@lab/kit';

/**
 * shared_buffers of the embedded PostgreSQL. PostgreSQL's default (128MB) lives in
 * PGlite's WebAssembly memory, which never shrinks, and was most of the idle
 * process (~550 MB RSS). A standalone install holds one small lab's data; table
 * pages PostgreSQL does not keep are still in the OS page cache, so 16MB costs
 * little. Set with ALTER SYSTEM, so an operator can raise it the same way.
 */
const EMBEDDED_SHARED_BUFFERS = '16MB';

/** The embedded PostgreSQL cluster of a data directory (where kit's openDatabase puts it). */
const pgData = (dataDir: string) => resolve(dataDir, 'pg');

/** True once the data directory's database exists and has a shared_buffers of its own. */
async function embeddedDataDirReady(dataDir: string): Promise<boolean> {
  try {
    const conf = await readFile(join(pgData(dataDir), 'postgresql.auto.conf'), 'utf8');
    return /^\s*shared_buffers\s*=/m.test(conf);
  } catch {
    return false;
  }
}

/** Creates the embedded database, or opens an existing one, and sizes it; in this process. */
export async function initEmbeddedDataDir(dataDir: string): Promise<void> {
  const db = await openDatabase({ dataDir });
  try {
    // ALTER SYSTEM cannot run in a transaction block, hence not db.tx / rawTx
    await db.orm.execute(sql.raw(`alter system set shared_buffers = '${EMBEDDED_SHARED_BUFFERS}'`));
  } finally {
    await db.close();
  }
}

/**
 * Before the standalone process opens its embedded database: on first start,
 * initdb runs in a short-lived child process instead. Creating the cluster loads a
 * second PGlite (initdb), builds the new cluster as an in-memory tar and unpacks
 * it; that memory is freed afterwards but the allocator keeps most of it, ~100 MB
 * of RSS for the life of the server. The child also applies
 * EMBEDDED_SHARED_BUFFERS, which only takes effect when PostgreSQL starts, so the
 * server's first start already runs with it. A data directory made before this
 * existed gets the same setting (once) when the server next starts.
 */
export async function prepareEmbeddedDataDir(dataDir: string, log: Logger): Promise<void> {
  if (await embeddedDataDirReady(dataDir)) return;
  log.info({ data_dir: dataDir }, 'preparing the embedded database (first start)');
  await new Promise<void>((done, fail) => {
    const child = spawn(process.execPath, [...process.execArgv, join(__dirname, 'embedded-init.js'), dataDir], {
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    child.on('error', fail);
    child.on('exit', (code, signal) => (code === 0 ? done() : fail(new Error(`preparing the embedded database failed (${signal ?? `exit code ${code}`})`))));
  });
}
