import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { randomToken } from '@lab/kit';

/**
 * The management API's bearer token: LAB_OPERATOR_TOKEN when set; otherwise one
 * generated on first start and kept (mode 0600) in the data directory, so it
 * survives restarts and is never printed, only its location.
 */
export async function operatorToken(given: string | undefined, dataDir: string): Promise<{ token: string; file?: string }> {
  if (given) return { token: given };
  const file = resolve(join(dataDir, 'operator-token'));
  try {
    const stored = (await readFile(file, 'utf8')).trim();
    if (stored) return { token: stored, file };
  } catch {
    /* first start */
  }
  await mkdir(dataDir, { recursive: true });
  const token = `op_${randomToken(32)}`;
  await writeFile(file, `${token}\n`, { mode: 0o600 });
  return { token, file };
}
