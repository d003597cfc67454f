// The whole service in one process as `npm start` runs it: package.json's start
// script through sh (which execs node, so the child's pid is the service's), with
// the node that runs the bench first on the PATH as under npm. Embedded unless
// `vars` name servers: no DATABASE_URL, AMQP_URL or REDIS_URL (PGlite in
// `<dataDir>`, the in-process bus, in-memory rate limits). Used by the memory and
// embedded scenarios.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from './cluster.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** VmRSS of a process, in bytes. */
export async function rssBytes(pid) {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)[1]) * 1024;
}

/**
 * Starts the standalone process and resolves once /v1/health answers, with its
 * URL, operator token, pid, start-up time, recent output and a stop().
 */
export async function startStandalone(dataDir, vars = {}) {
  const port = await freePort();
  const operatorToken = `op_${randomBytes(24).toString('hex')}`;
  const env = { ...process.env };
  for (const k of ['DATABASE_URL', 'AMQP_URL', 'REDIS_URL', 'NODE_OPTIONS']) delete env[k];
  Object.assign(env, {
    PORT: String(port),
    HOST: '127.0.0.1',
    LAB_DATA_DIR: dataDir,
    LAB_OPERATOR_TOKEN: operatorToken,
    METRICS_PORT: '0',
    LOG_LEVEL: 'warn',
    ...vars,
  });
  const started = performance.now();
  const { scripts } = JSON.parse(await readFile(join(root, 'package.json'), 'utf8'));
  env.PATH = `${dirname(process.execPath)}:${env.PATH ?? ''}`;
  const child = spawn('sh', ['-c', scripts.start], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  child.stdout.on('data', (b) => (log = (log + b).slice(-20_000)));
  child.stderr.on('data', (b) => (log = (log + b).slice(-20_000)));
  const exited = new Promise((r) => child.once('exit', r));
  const url = `http://127.0.0.1:${port}`;
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return true;
    child.kill('SIGTERM');
    const clean = await Promise.race([exited.then(() => true), sleep(20_000).then(() => false)]);
    if (!clean) {
      child.kill('SIGKILL');
      await exited;
    }
    return clean;
  };
  try {
    for (;;) {
      if (child.exitCode !== null) throw new Error(`standalone exited with ${child.exitCode}:\n${log}`);
      if (performance.now() - started > 60_000) throw new Error(`standalone not ready after 60 s:\n${log}`);
      const ok = await fetch(`${url}/v1/health`).then(
        (r) => r.ok,
        () => false,
      );
      if (ok) break;
      await sleep(100);
    }
  } catch (err) {
    await stop();
    throw err;
  }
  return { url, operatorToken, pid: child.pid, startupMs: performance.now() - started, log: () => log, exited, stop };
}
