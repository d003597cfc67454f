import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { openApiDocument, ROUTES } from '@lab/http-api';

const run = promisify(execFile);
// the package's exports do not list its CLI: found by the workspace's node_modules
const GENERATOR = path.resolve(__dirname, '../../../../node_modules/openapi-typescript/bin/cli.js');

/** Where the generated client types go (git-ignored): the scenario imports them. */
const SCHEMA_FILE = path.join(__dirname, 'schema.d.ts');

/** Generates the client types of the gateway's OpenAPI document with openapi-typescript. */
export async function generateClientTypes(out = SCHEMA_FILE): Promise<void> {
  const dir = mkdtempSync(path.join(tmpdir(), 'openapi-client-'));
  try {
    const file = path.join(dir, 'openapi.json');
    writeFileSync(file, JSON.stringify(openApiDocument(ROUTES)));
    await run(process.execPath, [GENERATOR, file, '-o', out], { maxBuffer: 16 * 1024 * 1024 });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
