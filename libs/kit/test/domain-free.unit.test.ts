import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

/**
 * libs/kit holds mechanisms only. The organisation's roles and what they may do
 * are the permission model's (libs/permissions); a role rule that creeps back
 * into kit would be a second one, free to disagree with the first.
 */
const SRC = join(__dirname, '..', 'src');

const ROLE_MENTIONS = [/\bviewer\b/i, /\bqm\b/i, /\bdept_admin\b/i, /\bresearcher\b/i, /\brole\s*[!=]==?\s*['"`]admin['"`]/, /\bcase\s+['"`]admin['"`]/];

/** The mentions of a role in `text`, as `line: text`. */
function roleMentions(text: string): string[] {
  return text.split('\n').flatMap((line, i) => (ROLE_MENTIONS.some((re) => re.test(line)) ? [`${i + 1}: ${line.trim()}`] : []));
}

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sources(path);
    return e.name.endsWith('.ts') ? [path] : [];
  });
}

describe('libs/kit is free of the permission model', () => {
  it('finds a role rule where there is one', () => {
    expect(roleMentions("if (caller.role === 'admin') return;")).toHaveLength(1);
    expect(roleMentions("  if (c.role !== 'admin') throw x;")).toHaveLength(1);
    expect(roleMentions("    case 'admin':")).toHaveLength(1);
    expect(roleMentions("const reads = ['viewer', 'qm'];\nconst x = 1;\n// a dept_admin may")).toEqual([
      "1: const reads = ['viewer', 'qm'];",
      '3: // a dept_admin may',
    ]);
    expect(roleMentions('/** the researcher who wrote it */')).toHaveLength(1);
    expect(roleMentions("queue role === 'main'; admin API; qmax")).toEqual([]);
  });

  it('names no role in any source file', () => {
    const files = sources(SRC);
    expect(files.length).toBeGreaterThan(10);
    const found = files.flatMap((f) => roleMentions(readFileSync(f, 'utf8')).map((m) => `${relative(SRC, f)}:${m}`));
    expect(found).toEqual([]);
  });
});
