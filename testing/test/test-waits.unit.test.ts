import { readdirSync, readFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import ts from 'typescript';

/**
 * Tests wait for the condition they need (testing/ `waitFor`), never a fixed
 * time, and a test either asserts or fails: it does not `return;` early and pass
 * having checked nothing. A fixed sleep is too short on a loaded machine (a flaky
 * test) and longer than needed everywhere else (a slow one). This check reads
 * every test file (helpers included) with the TypeScript parser, so a timeout
 * given to a wait, a deadline in a Promise.race or a `return;` in a callback
 * inside a test are not mistaken for either.
 *
 * No sleep is let through, whatever its comment says: "nothing happens after X"
 * waits for a sentinel that must come after X, a TTL or a timer runs on a faked
 * clock (or the database's, polled), and a load generator's rate and retry
 * backoff go through the one pacing helper, `pace` of the harness's waits module
 * (decision 028). A `return;` that is meant is marked `// deliberate return: <reason>`.
 */
const root = resolve(__dirname, '../..');

interface Finding {
  file: string;
  line: number;
  kind: 'fixed sleep' | 'early return';
  text: string;
}

/** Names a file binds to `setTimeout` of node:timers/promises (an awaited call of one sleeps). */
function timerAliases(sf: ts.SourceFile): Set<string> {
  const names = new Set<string>();
  for (const st of sf.statements) {
    if (!ts.isImportDeclaration(st) || !ts.isStringLiteral(st.moduleSpecifier)) continue;
    if (!/^(node:)?timers\/promises$/.test(st.moduleSpecifier.text)) continue;
    const bindings = st.importClause?.namedBindings;
    if (bindings && ts.isNamedImports(bindings)) {
      for (const el of bindings.elements) if ((el.propertyName ?? el.name).text === 'setTimeout') names.add(el.name.text);
    }
  }
  return names;
}

const isSetTimeoutCall = (n: ts.Node): n is ts.CallExpression => ts.isCallExpression(n) && ts.isIdentifier(n.expression) && n.expression.text === 'setTimeout';

/** `new Promise((r) => setTimeout(r, ms))` and its spellings: a promise that only a timer settles. */
function isTimerPromise(n: ts.Node): boolean {
  if (!ts.isNewExpression(n) || !ts.isIdentifier(n.expression) || n.expression.text !== 'Promise') return false;
  const executor = n.arguments?.[0];
  if (!executor || !(ts.isArrowFunction(executor) || ts.isFunctionExpression(executor))) return false;
  const body = executor.body;
  if (isSetTimeoutCall(body)) return true;
  return ts.isBlock(body) && body.statements.length === 1 && ts.isExpressionStatement(body.statements[0]!) && isSetTimeoutCall(body.statements[0].expression);
}

/** Local sleep helpers: `const sleep = (ms) => new Promise((r) => setTimeout(r, ms))`. */
function sleepHelpers(sf: ts.SourceFile): Set<string> {
  const names = new Set<string>();
  const visit = (n: ts.Node) => {
    if (ts.isVariableDeclaration(n) && ts.isIdentifier(n.name) && n.initializer && ts.isArrowFunction(n.initializer) && isTimerPromise(n.initializer.body)) {
      names.add(n.name.text);
    }
    if (ts.isFunctionDeclaration(n) && n.name && n.body?.statements.length === 1) {
      const only = n.body.statements[0]!;
      if (ts.isReturnStatement(only) && only.expression && isTimerPromise(only.expression)) names.add(n.name.text);
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return names;
}

const TEST_CALLS = new Set(['it', 'test']);

/** The callee of `it(…)`, `it.only(…)`, `it.each(…)(…)`, `test.concurrent(…)`…: is it a test? */
function isTestCall(call: ts.CallExpression): boolean {
  let e: ts.Expression = call.expression;
  for (;;) {
    if (ts.isIdentifier(e)) return TEST_CALLS.has(e.text);
    if (ts.isPropertyAccessExpression(e)) e = e.expression;
    else if (ts.isCallExpression(e)) e = e.expression;
    else if (ts.isTaggedTemplateExpression(e)) e = e.tag;
    else return false;
  }
}

/** `return;` statements of a test's own body (not of functions inside it, whose returns are theirs). */
function bareReturns(fn: ts.FunctionLikeDeclaration): ts.ReturnStatement[] {
  const found: ts.ReturnStatement[] = [];
  const visit = (n: ts.Node) => {
    if (ts.isReturnStatement(n) && !n.expression) found.push(n);
    if (ts.isFunctionLike(n)) return;
    ts.forEachChild(n, visit);
  };
  if (fn.body) ts.forEachChild(fn.body, visit);
  return found;
}

/** The marker on the node's line or in the comment lines right above it. */
function marked(sf: ts.SourceFile, node: ts.Node, marker: string): boolean {
  const lines = sf.text.split('\n');
  let line = sf.getLineAndCharacterOfPosition(node.getStart(sf)).line;
  if (lines[line]!.includes(marker)) return true;
  for (line--; line >= 0 && /^\s*(\/\/|\*|\/\*)/.test(lines[line]!); line--) if (lines[line]!.includes(marker)) return true;
  return false;
}

/** The fixed sleeps and early returns of one test file's text. */
function scan(file: string, text: string): Finding[] {
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const sleepers = new Set([...timerAliases(sf), ...sleepHelpers(sf), 'sleep']);
  const findings: Finding[] = [];
  const report = (node: ts.Node, kind: Finding['kind']) =>
    findings.push({ file, line: sf.getLineAndCharacterOfPosition(node.getStart(sf)).line + 1, kind, text: node.getText(sf).split('\n')[0]!.slice(0, 120) });

  const visit = (n: ts.Node) => {
    if (ts.isAwaitExpression(n)) {
      const e = n.expression;
      const sleeps = isTimerPromise(e) || (ts.isCallExpression(e) && ts.isIdentifier(e.expression) && sleepers.has(e.expression.text));
      if (sleeps) report(n, 'fixed sleep');
    }
    // a promise resolved by a timer it sets itself: `setTimeout(() => resolve(x), ms)` inside its executor
    if (isSetTimeoutCall(n)) {
      const cb = n.arguments[0];
      const executor = ts.findAncestor(
        n.parent,
        (a) => (ts.isArrowFunction(a) || ts.isFunctionExpression(a)) && ts.isNewExpression(a.parent) && a.parent.expression.getText(sf) === 'Promise',
      ) as ts.ArrowFunction | ts.FunctionExpression | undefined;
      const resolveName = executor?.parameters[0]?.name.getText(sf);
      const resolves =
        resolveName !== undefined &&
        cb !== undefined &&
        (cb.getText(sf) === resolveName ||
          ((ts.isArrowFunction(cb) || ts.isFunctionExpression(cb)) &&
            ts.isCallExpression(cb.body) &&
            ts.isIdentifier(cb.body.expression) &&
            cb.body.expression.text === resolveName));
      // the executor that is only this timer is the awaited sleep above, reported there
      if (resolves && !isTimerPromise(executor!.parent)) report(n, 'fixed sleep');
    }
    if (ts.isCallExpression(n) && isTestCall(n)) {
      const fn = n.arguments.find((a): a is ts.ArrowFunction | ts.FunctionExpression => ts.isArrowFunction(a) || ts.isFunctionExpression(a));
      if (fn) for (const r of bareReturns(fn)) if (!marked(sf, r, 'deliberate return:')) report(r, 'early return');
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return findings.sort((a, b) => a.line - b.line);
}

/** Every .ts file under the test folders of the services, the libraries, the gateway's packages and the harness. */
function testFiles(): string[] {
  return ['services', 'libs', 'services/gateway/packages', '.'].flatMap((top) =>
    readdirSync(join(root, top)).flatMap((pkg) => {
      if (top === '.' && pkg !== 'testing') return [];
      const dir = join(root, top, pkg, 'test');
      let entries: string[];
      try {
        entries = readdirSync(dir, { recursive: true }) as string[];
      } catch {
        return [];
      }
      return entries.filter((p) => p.endsWith('.ts') && !p.split(/[\\/]/).includes('node_modules')).map((p) => join(dir, p));
    }),
  );
}

describe('tests wait for conditions', () => {
  it('finds fixed sleeps, marked or not, and early returns, and leaves waits, deadlines and the load pacing alone (the check itself works)', () => {
    const text = `
import { setTimeout as delay } from 'node:timers/promises';
import { pace, waitFor } from '../../src/waits';
const nap = (ms: number) => new Promise((r) => setTimeout(r, ms));
it('sleeps', async () => {
  await new Promise((r) => setTimeout(r, 100));
  await new Promise<void>((resolve) => { setTimeout(resolve, 5); });
  await delay(50);
  await nap(10);
  await sleep(10);
  const x = await new Promise((resolve) => { other(); setTimeout(() => resolve(1), 500); });
  if (!process.env.X) return;
});
it.each([[1]])('returns %s', async (n) => {
  if (n) return;
  expect(n).toBe(1);
});
test('waits properly', async () => {
  await waitFor('the row', () => rows() > 0, { timeoutMs: 5_000 });
  await Promise.race([p, delay(2_000, 'pending', { ref: false })]);
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await new Promise((resolve, reject) => { setTimeout(() => reject(new Error('late')), 100); go(resolve); });
  sock.on('message', (m) => { if (!m) return; seen.push(m); });
  await pace(100); // a load client's rate
  // deliberate wait: the subject is that nothing happens in the window
  await delay(HELD_WINDOW_MS);
  await nap(5); // deliberate wait: a slow stub
  expect(seen).toEqual([]);
});
afterEach(async () => { if (!h) return; });
describe.each(cases)('%s', (c) => {
  if (!c.updatable) return;
  it('updates', () => expect(c).toBeTruthy());
});
`;
    expect(scan('sample.ts', text).map((f) => [f.line, f.kind])).toEqual([
      [6, 'fixed sleep'],
      [7, 'fixed sleep'],
      [8, 'fixed sleep'],
      [9, 'fixed sleep'],
      [10, 'fixed sleep'],
      [11, 'fixed sleep'],
      [12, 'early return'],
      [15, 'early return'],
      // a comment does not make a sleep a wait
      [26, 'fixed sleep'],
      [27, 'fixed sleep'],
    ]);
    // the load pacing is the harness's one helper, not a sleep of a file's own named like it
    const ownPace = `
const pace = (ms: number) => new Promise((r) => setTimeout(r, ms));
it('paces', async () => {
  await pace(10);
});
`;
    expect(scan('own-pace.ts', ownPace).map((f) => [f.line, f.kind])).toEqual([[4, 'fixed sleep']]);
  });

  it('finds none in the services and libraries', () => {
    const files = testFiles();
    expect(files.length).toBeGreaterThan(50);
    const found = files.flatMap((f) => scan(relative(root, f), readFileSync(f, 'utf8')));
    expect(found.map((f) => `${f.file}:${f.line} ${f.kind}: ${f.text}`)).toEqual([]);
  });
});
