import { execFile } from 'node:child_process';
import { createServer, request, type Server } from 'node:http';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startStack, type Stack } from '@lab/testing';
import { call } from './http';
import { FN } from './oauth-flow';

/**
 * The official MCP conformance suite (@modelcontextprotocol/conformance, its
 * server mode) against the running MCP function. Only the scenarios whose
 * requirements do not depend on the suite's own fixtures are run: the others ask
 * for tools, prompts and resources (`test_simple_text`, `test://static-text`...)
 * that only the suite's reference server has. completion-complete is one of
 * those: it completes the suite's prompt `test_prompt_with_arguments`, and this
 * server has no prompts (its completions are checked in mcp-resources.e2e.test.ts).
 *
 * The suite has no option for headers, so it talks to a small proxy here that
 * adds the sign-in (a bearer sign-in token) to every request, as an MCP client
 * holding a token would. Its CLI needs Node 22 or later: it runs on the Node
 * this test runs on (the project's, from node_modules).
 */
const SCENARIOS = ['server-initialize', 'ping', 'tools-list', 'resources-list'];
const CLI = require.resolve('@modelcontextprotocol/conformance/dist/index.js');
const password = 'a long enough password';

let stack: Stack;
let proxy: Server;
let proxyUrl: string;
let outDir: string;

/** Forwards each request to the gateway with the Authorization header added. */
function signingProxy(target: URL, authorization: string): Server {
  return createServer((req, res) => {
    const headers = { ...req.headers, host: target.host, authorization };
    const out = request({ host: target.hostname, port: target.port, path: req.url, method: req.method, headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    out.on('error', () => res.writeHead(502).end());
    req.pipe(out);
  });
}

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'notebook', 'equipment', 'audit'] });
  const org = (await stack.admin.createOrg({ modules: ['lab_equipment'] })).id;
  const u = await stack.admin.createUser({ password });
  await stack.admin.putMember(org, u.id, 'researcher');
  const key = (await stack.admin.createApiKey(org, { scopes: ['write'] })).token;
  await call(stack.url, 'POST', '/v1/samples', { token: key, body: { name: 'Conformance sample' } });
  const session = await call(stack.url, 'POST', '/auth/v1/token', { body: { grant_type: 'password', email: u.email, password } });
  proxy = signingProxy(new URL(stack.url), `Bearer ${session.body.access_token as string}`);
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  proxyUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
  outDir = await mkdtemp(join(tmpdir(), 'mcp-conformance-'));
});

afterAll(async () => {
  await new Promise<void>((resolve) => (proxy ? proxy.close(() => resolve()) : resolve()));
  await stack?.stop();
  if (outDir) await rm(outDir, { recursive: true, force: true });
});

interface Check {
  id: string;
  /** SUCCESS, FAILURE, WARNING or INFO */
  status: string;
  errorMessage?: string;
}

/** Runs one scenario; its exit code, output and the checks it saved. */
async function runScenario(scenario: string): Promise<{ code: number; output: string; checks: Check[] }> {
  const dir = join(outDir, scenario);
  const { code, output } = await new Promise<{ code: number; output: string }>((resolve) => {
    execFile(
      process.execPath,
      [CLI, 'server', '--url', `${proxyUrl}${FN}/mcp`, '--scenario', scenario, '--output-dir', dir],
      { timeout: 120_000 },
      (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, output: `${stdout}${stderr}` }),
    );
  });
  const checks: Check[] = [];
  for (const entry of await readdir(dir, { recursive: true }).catch(() => [] as string[])) {
    if (entry.endsWith('checks.json')) checks.push(...(JSON.parse(await readFile(join(dir, entry), 'utf8')) as Check[]));
  }
  return { code, output, checks };
}

it('runs on a Node the suite supports', () => {
  expect(Number(process.versions.node.split('.')[0])).toBeGreaterThanOrEqual(22);
});

it.each(SCENARIOS)('passes the conformance scenario %s', async (scenario) => {
  const { code, output, checks } = await runScenario(scenario);
  const failed = checks.filter((c) => c.status === 'FAILURE').map((c) => `${c.id}: ${c.errorMessage ?? ''}`);
  expect({ scenario, failed }).toEqual({ scenario, failed: [] });
  expect(checks.length).toBeGreaterThan(0);
  expect(checks.some((c) => c.status === 'SUCCESS')).toBe(true);
  if (code !== 0) throw new Error(`the suite exited with ${code}:\n${output}`);
});
