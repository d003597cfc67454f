import { spawn } from 'node:child_process';
import { join } from 'node:path';

/**
 * How an entry point ends when it cannot go on: a failed start, and later an
 * exception or a rejection that nothing handled, each end the process with exit
 * code 1 and one fatal line in the log format (the built kit, as a process runs it).
 */
const kit = join(__dirname, '..', 'dist', 'index.js');

function run(body: string): Promise<{ code: number | null; lines: Record<string, unknown>[] }> {
  const script = `const { createLogger, exitOnFailure } = require(${JSON.stringify(kit)});
const log = createLogger('exit-test');
${body}`;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NODE_OPTIONS: '' } });
    let out = '';
    child.stdout.on('data', (b: Buffer) => (out += b.toString()));
    child.on('error', reject);
    child.on('exit', (code) =>
      resolve({
        code,
        lines: out
          .split('\n')
          .filter((l) => l.startsWith('{'))
          .map((l) => JSON.parse(l) as Record<string, unknown>),
      }),
    );
  });
}

const fatalLine = (lines: Record<string, unknown>[]) => lines.find((l) => l.level === 60) as { msg: string; err: { message: string } } | undefined;

describe('exitOnFailure', () => {
  it('a start that fails: exit 1 and a fatal line saying so', async () => {
    const { code, lines } = await run(`exitOnFailure(log, Promise.reject(new Error('database unreachable')));`);
    expect(code).toBe(1);
    expect(fatalLine(lines)).toMatchObject({ msg: 'failed to start', err: { message: 'database unreachable' } });
  });

  it('a rejection nothing handled, after the start: exit 1 and a fatal line', async () => {
    const { code, lines } = await run(`exitOnFailure(log, Promise.resolve());
setTimeout(() => { Promise.reject(new Error('lost promise')); }, 10);
setTimeout(() => {}, 5000);`);
    expect(code).toBe(1);
    expect(fatalLine(lines)).toMatchObject({ msg: 'unhandled rejection', err: { message: 'lost promise' } });
  });

  it('an exception nothing caught: exit 1 and a fatal line', async () => {
    const { code, lines } = await run(`exitOnFailure(log, Promise.resolve());
setTimeout(() => { throw new Error('thrown in a timer'); }, 10);
setTimeout(() => {}, 5000);`);
    expect(code).toBe(1);
    expect(fatalLine(lines)).toMatchObject({ msg: 'uncaught exception', err: { message: 'thrown in a timer' } });
  });

  it('a start that succeeds leaves the process running', async () => {
    const { code, lines } = await run(`exitOnFailure(log, Promise.resolve());
setTimeout(() => { log.info('still here'); process.exit(0); }, 50);`);
    expect(code).toBe(0);
    expect(lines.map((l) => l.msg)).toEqual(['still here']);
  });
});
