import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';

/**
 * A dependency's private fields and prototypes are touched only by the adapters of
 * libs/kit/src/adapters (decision 055): pinned, checked at start, each guarded by a
 * test of its own. This guard fails when a known pattern comes back anywhere else in
 * the sources (textual, so it catches what was done before, not every way to do it).
 */
const ROOT = join(__dirname, '..', '..', '..');
const ADAPTERS = join('libs', 'kit', 'src', 'adapters') + sep;

const PRIVATE_ACCESS: { what: string; re: RegExp }[] = [
  { what: "amqplib's muxer._readIncoming", re: /\._readIncoming\b/ },
  { what: "grpc-js's Server#http2Servers", re: /\bhttp2Servers\b/ },
  { what: "pg's client.connection.stream", re: /\.connection\??\.stream\b/ },
  { what: "drizzle's NodePgSession / NodePgTransaction", re: /\bNodePg(Session|Transaction)\b/ },
  { what: "drizzle's private dialect", re: /\.dialect\b/ },
  { what: 'a replaced prototype method', re: /\.prototype\.[\w$]+\s*=(?!=)/ },
  { what: 'a replaced prototype method', re: /\.prototype\[[^\]]+\]\s*=(?!=)/ },
  { what: 'a property defined on a prototype', re: /defineProperty\(\s*[\w$.]+\.prototype\b/ },
  { what: 'a replaced bind', re: /prototype\.bind\s*=/ },
];

/** The private accesses in `text`, as `line: what`. */
export function privateAccesses(text: string): string[] {
  return text.split('\n').flatMap((line, i) => PRIVATE_ACCESS.filter(({ re }) => re.test(line)).map(({ what }) => `${i + 1}: ${what}: ${line.trim()}`));
}

function sources(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return e.name === 'node_modules' || e.name === 'dist' ? [] : sources(path);
    return /\.(ts|mts|js|mjs)$/.test(e.name) && !e.name.endsWith('.d.ts') ? [path] : [];
  });
}

function children(dir: string): string[] {
  const abs = join(ROOT, dir);
  return existsSync(abs)
    ? readdirSync(abs, { withFileTypes: true })
        .filter((e) => e.isDirectory())
        .map((e) => join(abs, e.name, 'src'))
    : [];
}

const SOURCE_DIRS = [...children('libs'), ...children('services'), ...children(join('services', 'gateway', 'packages'))];

describe("a dependency's internals only in libs/kit/src/adapters", () => {
  it('recognises the known patterns', () => {
    expect(privateAccesses('  mux._readIncoming = function () {}')).toHaveLength(1);
    expect(privateAccesses('const s = (server as any).http2Servers;')).toHaveLength(1);
    expect(privateAccesses('client.connection?.stream')).toHaveLength(1);
    expect(privateAccesses('const x = (c as any).connection.stream;')).toHaveLength(1);
    expect(privateAccesses("import { NodePgSession } from 'drizzle-orm/node-postgres';")).toHaveLength(1);
    expect(privateAccesses('const d = (orm as any).dialect;')).toHaveLength(1);
    expect(privateAccesses('AsyncResource.prototype.bind = leanBind;').length).toBeGreaterThan(0);
    expect(privateAccesses('Socket.prototype.write = w;')).toHaveLength(1);
    expect(privateAccesses("Object.defineProperty(Foo.prototype, 'x', {})")).toHaveLength(1);
    expect(privateAccesses('if (A.prototype.b === c) return;')).toHaveLength(0);
    expect(privateAccesses('for (const srv of http2ServersOf(this.server)) {')).toHaveLength(0);
  });

  it('scans the sources of every library, service and gateway package', () => {
    expect(SOURCE_DIRS.some((d) => d.includes(join('libs', 'kit', 'src')))).toBe(true);
    expect(SOURCE_DIRS.filter((d) => d.includes(`services${sep}`)).length).toBeGreaterThan(3);
  });

  it('finds none outside the adapters', () => {
    const found = SOURCE_DIRS.flatMap(sources)
      .filter((file) => !relative(ROOT, file).startsWith(ADAPTERS))
      .flatMap((file) => privateAccesses(readFileSync(file, 'utf8')).map((hit) => `${relative(ROOT, file)}:${hit}`));
    expect(found).toEqual([]);
  });
});
