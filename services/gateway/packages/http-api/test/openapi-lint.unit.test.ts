/**
 * Redocly CLI's recommended rules over the generated document: no errors, and
 * no warning but the ones docs/decisions.md justifies ("The OpenAPI document"):
 * a new warning fails here until it is fixed or justified there and listed below.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { openApiDocument } from '../src/openapi';
import { ROUTES } from '../src/routes';

const run = promisify(execFile);
const CLI = require.resolve('@redocly/cli/bin/cli.js');

interface Problem {
  ruleId: string;
  severity: 'error' | 'warn';
  message: string;
  location: { pointer: string }[];
}

/** Warnings the decisions justify: [rule, JSON pointer pattern]. */
const JUSTIFIED: [string, RegExp][] = [
  // the update of a record or the X-Test-Mode echo: closed shapes that cannot both match (additionalProperties: false)
  ['no-illogical-composition-keywords', /^#\/paths\/~1v1~1[a-z-]+~1\{id\}\/(put|patch)\/responses\/200\/content\/application~1json\/schema\/oneOf$/],
];

async function lint(document: unknown): Promise<Problem[]> {
  const dir = mkdtempSync(path.join(tmpdir(), 'openapi-lint-'));
  try {
    const file = path.join(dir, 'openapi.json');
    writeFileSync(file, JSON.stringify(document, null, 1));
    // exit code 1 when there are errors: the JSON report is on stdout either way
    const out = await run(process.execPath, [CLI, 'lint', file, '--format=json'], { maxBuffer: 64 * 1024 * 1024, cwd: dir }).catch(
      (err: { stdout?: string }) => ({ stdout: err.stdout ?? '' }),
    );
    return (JSON.parse(out.stdout) as { problems: Problem[] }).problems;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const justified = (p: Problem) => JUSTIFIED.some(([rule, at]) => p.ruleId === rule && p.location.every((l) => at.test(l.pointer)));
const show = (p: Problem) => `${p.severity} ${p.ruleId} ${p.location.map((l) => l.pointer).join(' ')}: ${p.message}`;

describe('Redocly lint of the OpenAPI document', () => {
  it('has no errors and no unjustified warnings', async () => {
    const problems = await lint(openApiDocument(ROUTES));
    expect(problems.filter((p) => p.severity === 'error').map(show)).toEqual([]);
    expect(problems.filter((p) => !justified(p)).map(show)).toEqual([]);
  }, 120_000);

  it('reports what is wrong (the check above can fail)', async () => {
    const broken = openApiDocument(ROUTES) as { paths: Record<string, Record<string, { operationId?: string }>> };
    broken.paths['/v1/samples']!.get!.operationId = broken.paths['/v1/samples']!.post!.operationId;
    const problems = await lint(broken);
    expect(problems.filter((p) => p.severity === 'error').map((p) => p.ruleId)).toContain('operation-operationId-unique');
  }, 120_000);
});
