import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

// The README's quick start as a newcomer runs it: `npm start` from the repository
// root (embedded database and bus, whatever servers the test environment offers),
// the README's "A first session" script twice, then a SIGTERM to the npm process
// only, as Docker, systemd and process managers send it.
const root = resolve(__dirname, '../../..');
const readme = readFileSync(join(root, 'README.md'), 'utf8');

/** The first sh block after a heading, as the README shows it. */
function shBlockAfter(heading: string): string {
  const at = readme.indexOf(heading);
  if (at < 0) throw new Error(`README has no "${heading}"`);
  const block = /```sh\n([\s\S]*?)```/.exec(readme.slice(at));
  if (!block) throw new Error(`README has no sh block after "${heading}"`);
  return block[1];
}

/** Pids of the direct children of `pid`, read from /proc. */
function childrenOf(pid: number): number[] {
  return readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .filter((d) => {
      try {
        // "pid (comm) state ppid ...": comm may hold spaces, so split after ')'
        const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
        return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid;
      } catch {
        return false; // gone meanwhile
      }
    })
    .map(Number);
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

function waitForReadyLine(child: ChildProcess): Promise<{ url: string; msg: string }> {
  return new Promise((ok, fail) => {
    let buffered = '';
    const onData = (chunk: Buffer) => {
      buffered += chunk.toString();
      for (const line of buffered.split('\n')) {
        if (!line.startsWith('{')) continue;
        try {
          const entry = JSON.parse(line) as { msg?: string; url?: string };
          if (entry.msg?.startsWith('lab notebook service ready on ')) {
            child.stdout!.off('data', onData);
            ok({ url: entry.url!, msg: entry.msg });
          }
        } catch {
          // a line still being written
        }
      }
    };
    child.stdout!.on('data', onData);
    child.once('exit', (code) => fail(new Error(`npm start exited with ${code} before it was ready:\n${buffered.slice(-2000)}`)));
  });
}

test('npm start serves the README first session (twice) and stops on a SIGTERM to npm', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'lab-quick-start-'));
  const env: NodeJS.ProcessEnv = { ...process.env, PORT: '0', HOST: '127.0.0.1', LAB_DATA_DIR: dataDir, METRICS_PORT: '0' };
  // the newcomer's machine has none of these
  // eslint-disable-next-line @typescript-eslint/no-dynamic-delete -- delete is how a variable leaves the environment
  for (const name of ['DATABASE_URL', 'AMQP_URL', 'REDIS_URL', 'NODE_OPTIONS', 'LAB_OPERATOR_TOKEN']) delete env[name];
  // its own process group, so a failed test can take the service down with npm
  const npm = spawn('npm', ['start'], { cwd: root, env, stdio: ['ignore', 'pipe', 'inherit'], detached: true });
  const exited = new Promise<number | null>((r) => npm.once('exit', (code) => r(code)));
  try {
    const ready = await waitForReadyLine(npm);
    expect(ready.msg).toBe(`lab notebook service ready on ${ready.url} (operator token in ${join(dataDir, 'operator-token')})`);
    // the README quotes the line for the defaults: same words, port 8080, ./data
    expect(readme).toContain(`\`lab notebook service ready on http://127.0.0.1:8080 (operator token in data/operator-token)\``);

    const session = shBlockAfter('### A first session')
      .replace('API=http://localhost:8080', `API=${ready.url}`)
      .replace('cat data/operator-token', `cat ${join(dataDir, 'operator-token')}`);
    for (const run of [1, 2]) {
      const out = spawnSync('bash', ['-c', session], { encoding: 'utf8', timeout: 30_000 });
      expect({ run, status: out.status, stderr: out.stderr }).toEqual({ run, status: 0, stderr: '' });
      expect(out.stdout).toContain('"S-1"');
    }

    // Broken on purpose: the script stops at the first error and shows the answer.
    const broken = spawnSync('bash', ['-c', session.replace('"name":"Demo lab"', '"name":""')], { encoding: 'utf8', timeout: 30_000 });
    expect(broken.status).not.toBe(0);
    expect(broken.stderr).toContain('"code":"validation_failed"');

    const service = childrenOf(npm.pid!);
    expect(service).toHaveLength(1);
    // the service itself, not a shell in between that would not pass the signal on
    expect(readFileSync(`/proc/${service[0]}/cmdline`, 'utf8').split('\0')).toContain('services/standalone/dist/main.js');
    npm.kill('SIGTERM');
    const deadline = setTimeout(() => npm.kill('SIGKILL'), 20_000);
    expect(await exited).toBe(0);
    clearTimeout(deadline);
    expect(alive(service[0])).toBe(false);
    await expect(fetch(`${ready.url}/v1/health`)).rejects.toThrow();
  } finally {
    try {
      process.kill(-npm.pid!, 'SIGKILL');
    } catch {
      // the group is gone: the test passed
    }
  }
}, 180_000);
