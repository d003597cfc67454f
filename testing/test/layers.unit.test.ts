import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';

/**
 * Arrows point one way (docs/architecture.md, "Layers"):
 * - `libs/*` are libraries: they import libraries, never a service, a gateway
 *   package or the test harness;
 * - `services/*` are the deployables: they import libraries and, where a service
 *   serves another's data, that service's exported schemas; never the harness;
 * - `services/gateway/packages/*` are the gateway's own packages (the HTTP
 *   contract, the functions base): only the gateway and the standalone use them;
 * - `testing/` is the harness that starts everything: nothing below imports it
 *   from its source.
 * Read from each package's source (static imports, re-exports, dynamic imports
 * and require calls with a literal specifier) and its package.json / tsconfig.json
 * references, so an arrow cannot come back in through a side door.
 */
const root = resolve(__dirname, '../..');

type Layer = 'library' | 'service' | 'gateway-package' | 'harness';

interface Pkg {
  name: string;
  dir: string;
  layer: Layer;
}

function packagesUnder(dir: string, layer: Layer): Pkg[] {
  const abs = join(root, dir);
  return readdirSync(abs, { withFileTypes: true })
    .filter((d) => d.isDirectory() && existsSync(join(abs, d.name, 'package.json')))
    .map((d) => ({
      name: (JSON.parse(readFileSync(join(abs, d.name, 'package.json'), 'utf8')) as { name: string }).name,
      dir: join(dir, d.name),
      layer,
    }));
}

const packages: Pkg[] = [
  ...packagesUnder('libs', 'library'),
  ...packagesUnder('services', 'service'),
  ...packagesUnder('services/gateway/packages', 'gateway-package'),
  { name: '@lab/testing', dir: 'testing', layer: 'harness' },
];
const byName = new Map(packages.map((p) => [p.name, p]));

/** Who may import a package of each layer: the importer's layer, or the importer's name. */
function allowed(importer: Pkg, imported: Pkg): boolean {
  if (importer.name === imported.name) return true;
  switch (imported.layer) {
    case 'library':
      return true;
    case 'service':
      return importer.layer !== 'library';
    case 'gateway-package':
      return importer.layer === 'gateway-package' || importer.layer === 'harness' || ['@lab/gateway', '@lab/standalone'].includes(importer.name);
    case 'harness':
      return importer.layer === 'harness';
  }
}

const SPECIFIER = /(?:\bfrom\s*|\bimport\s*\(\s*|\brequire\s*\(\s*|^\s*import\s+)['"](@lab\/[a-z-]+)(?:\/[a-z-]+)?['"]/gm;

/** The @lab packages a source text imports. */
function importsOf(text: string): string[] {
  return [...text.matchAll(SPECIFIER)].map((m) => m[1]!);
}

function sourceFiles(dir: string): string[] {
  const abs = join(root, dir);
  if (!existsSync(abs)) return [];
  return readdirSync(abs, { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))
    .map((f) => join(abs, f));
}

/** "importer file -> imported package" for every arrow that points the wrong way. */
function wrongArrows(pkgs: Pkg[]): string[] {
  const out: string[] = [];
  for (const pkg of pkgs) {
    for (const file of sourceFiles(join(pkg.dir, 'src'))) {
      for (const spec of importsOf(readFileSync(file, 'utf8'))) {
        const target = byName.get(spec);
        if (target && !allowed(pkg, target)) out.push(`${relative(root, file)} -> ${spec}`);
      }
    }
    const manifest = JSON.parse(readFileSync(join(root, pkg.dir, 'package.json'), 'utf8')) as Record<string, Record<string, string> | undefined>;
    for (const dep of Object.keys({ ...manifest.dependencies, ...manifest.peerDependencies })) {
      const target = byName.get(dep);
      if (target && !allowed(pkg, target)) out.push(`${pkg.dir}/package.json -> ${dep}`);
    }
    const tsconfig = join(root, pkg.dir, 'tsconfig.json');
    if (existsSync(tsconfig)) {
      for (const m of readFileSync(tsconfig, 'utf8').matchAll(/"path":\s*"([^"]+)"/g)) {
        const dir = relative(root, resolve(root, pkg.dir, m[1]!));
        const target = packages.find((p) => p.dir === dir);
        if (target && !allowed(pkg, target)) out.push(`${pkg.dir}/tsconfig.json -> ${target.name}`);
      }
    }
  }
  return out;
}

describe('layers', () => {
  it('knows every layer (the check below has something to check)', () => {
    const layers = new Set(packages.map((p) => p.layer));
    expect([...layers].sort()).toEqual(['gateway-package', 'harness', 'library', 'service']);
    expect(byName.get('@lab/http-api')?.layer).toBe('gateway-package');
    expect(byName.get('@lab/kit')?.layer).toBe('library');
  });

  it('reads every form of import (the check can fail)', () => {
    const text = [
      "import { a } from '@lab/identity';",
      "export * from '@lab/notebook/record-schemas';",
      "const m = await import('@lab/jobs');",
      "const r = require('@lab/audit');",
      "import '@lab/webhooks';",
    ].join('\n');
    expect(importsOf(text)).toEqual(['@lab/identity', '@lab/notebook', '@lab/jobs', '@lab/audit', '@lab/webhooks']);
    const kit = byName.get('@lab/kit')!;
    expect(allowed(kit, byName.get('@lab/identity')!)).toBe(false);
    expect(allowed(byName.get('@lab/notebook')!, byName.get('@lab/http-api')!)).toBe(false);
    expect(allowed(byName.get('@lab/notebook')!, byName.get('@lab/testing')!)).toBe(false);
    expect(allowed(byName.get('@lab/gateway')!, byName.get('@lab/http-api')!)).toBe(true);
  });

  it('has no library importing a service, and nothing below the harness importing it', () => {
    expect(wrongArrows(packages)).toEqual([]);
  });
});
