// Where every scenario leaves its figures: bench/results/<name>.json, with the
// machine, date and commit they were measured on. bench/report.mjs reads them.
import { execSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const resultsDir = join(dirname(fileURLToPath(import.meta.url)), 'results');

export function machine() {
  let commit = 'unknown';
  try {
    commit = execSync('git rev-parse --short HEAD', { stdio: ['ignore', 'pipe', 'ignore'] })
      .toString()
      .trim();
  } catch {
    /* not a checkout */
  }
  return {
    date: new Date().toISOString(),
    commit,
    node: process.version,
    cpus: `${os.cpus().length} x ${os.cpus()[0]?.model ?? 'unknown'}`,
    memory_gib: Math.round(os.totalmem() / 2 ** 30),
    load_average_1m: os.loadavg()[0],
  };
}

export function saveResult(name, data) {
  mkdirSync(resultsDir, { recursive: true });
  writeFileSync(join(resultsDir, `${name}.json`), JSON.stringify({ meta: machine(), ...data }, null, 2));
}
