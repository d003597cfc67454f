/**
 * A generated client fits the document: openapi-typescript turns the gateway's
 * OpenAPI document into types (test/client/schema.d.ts), and tsc (strict)
 * type-checks an integrator's scenario written against them with openapi-fetch
 * (test/client/scenario.ts): create a sample, page through samples, consume
 * stock of a reagent, start a job and read it. The scenario has no `any` and no
 * casts, so a document that types these answers loosely or wrongly fails here.
 */
import { execFile } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import ts from 'typescript';
import { generateClientTypes } from './client/generate';

const run = promisify(execFile);
const CLIENT_DIR = path.join(__dirname, 'client');
// the package's exports do not list its CLI: found by the workspace's node_modules
const TSC = require.resolve('typescript/bin/tsc');

/** tsc --noEmit, strict, over the given files of the client directory: its diagnostics ('' when they fit). */
async function typeCheck(files: string[]): Promise<string> {
  const tsconfig = path.join(CLIENT_DIR, `tsconfig.check-${process.pid}.json`);
  writeFileSync(
    tsconfig,
    JSON.stringify({
      compilerOptions: {
        strict: true,
        noEmit: true,
        noUncheckedIndexedAccess: true,
        exactOptionalPropertyTypes: false,
        target: 'ES2023',
        lib: ['ES2023', 'DOM'],
        module: 'nodenext',
        moduleResolution: 'nodenext',
        skipLibCheck: true,
        types: [],
      },
      files,
    }),
  );
  try {
    await run(process.execPath, [TSC, '-p', tsconfig], { maxBuffer: 16 * 1024 * 1024 });
    return '';
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string; message: string };
    return `${e.stdout ?? ''}${e.stderr ?? ''}` || e.message;
  } finally {
    rmSync(tsconfig, { force: true });
  }
}

/** The ways around the types a source uses: `any`, casts (`as`, `<T>x`) and non-null assertions (`x!`). */
function escapes(source: string): string[] {
  const file = ts.createSourceFile('scenario.ts', source, ts.ScriptTarget.ES2022, true);
  const found: string[] = [];
  const visit = (node: ts.Node) => {
    const constCast = ts.isAsExpression(node) && ts.isTypeReferenceNode(node.type) && node.type.typeName.getText(file) === 'const';
    if (
      node.kind === ts.SyntaxKind.AnyKeyword ||
      (ts.isAsExpression(node) && !constCast) ||
      ts.isTypeAssertionExpression(node) ||
      ts.isNonNullExpression(node)
    ) {
      found.push(`${file.getLineAndCharacterOfPosition(node.getStart(file)).line + 1}: ${node.getText(file)}`);
    }
    ts.forEachChild(node, visit);
  };
  visit(file);
  return found;
}

describe('a client generated from the OpenAPI document', () => {
  beforeAll(async () => {
    await generateClientTypes();
  }, 120_000);

  it('type-checks the integrator scenario (strict, no any, no casts)', async () => {
    expect(escapes(readFileSync(path.join(CLIENT_DIR, 'scenario.ts'), 'utf8'))).toEqual([]);
    expect(await typeCheck(['scenario.ts'])).toBe('');
  }, 120_000);

  it('finds the ways around the types (the check above can fail)', () => {
    expect(escapes('const a: any = 1; const b = a as string; const c = <number>a; const d = b!; const e = [1] as const;')).toHaveLength(4);
  });

  it('fails a scenario that does not fit the document (the check above can fail)', async () => {
    const bad = path.join(CLIENT_DIR, `misfit-${process.pid}.ts`);
    writeFileSync(
      bad,
      [
        "import createClient from 'openapi-fetch';",
        "import type { paths } from './schema';",
        "const client = createClient<paths>({ baseUrl: 'http://localhost' });",
        'export async function misfit(): Promise<void> {',
        // a read-only field in a create body, a number where a string goes, a field no stock movement has
        "  await client.POST('/v1/samples', { body: { name: 1, id: 'x' } });",
        "  const m = await client.POST('/v1/stock-movements', { body: { stock_item_id: 'x', movement_type: 'consume', quantity_delta: -1 } });",
        '  const n: string | undefined = m.data?.data.quantity_after;',
        '  void n;',
        '}',
      ].join('\n'),
    );
    try {
      const out = await typeCheck([path.basename(bad)]);
      expect(out).toMatch(/misfit-\d+\.ts\(5,/);
      expect(out).toMatch(/misfit-\d+\.ts\(7,/);
    } finally {
      rmSync(bad, { force: true });
    }
  }, 120_000);
});
