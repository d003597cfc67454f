import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Server, ServerCredentials } from '@grpc/grpc-js';
import { HealthImplementation, type ServingStatus } from 'grpc-health-check';

/**
 * docker/smoke-check.mjs, the script the chart's `helm test` Pod runs, for real:
 * gRPC servers serving the standard health service (as every lab service does,
 * libs/kit's GrpcServer) and an HTTP server standing in for the gateway, reached
 * through ipv4: lists and dns:/// names as in the cluster.
 */

const root = join(__dirname, '..', '..');
const script = join(root, 'docker', 'smoke-check.mjs');

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/** Runs the script with only the given environment (no address variables of this process). */
function smoke(env: Record<string, string>): Promise<Run> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script], { cwd: root, env: { PATH: process.env.PATH ?? '', ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr, ms: Date.now() - started }));
  });
}

interface HealthServer {
  port: number;
  health: HealthImplementation;
  server: Server;
  /** Check calls answered so far */
  checks(): number;
}

/** `answered`: how many Check calls get an answer; later ones are left hanging. */
async function healthServer(status: ServingStatus, answered = Infinity): Promise<HealthServer> {
  const server = new Server();
  const health = new HealthImplementation({ '': status });
  // the standard implementation, its Check calls counted on the way in
  let checks = 0;
  const addService = server.addService.bind(server);
  server.addService = (definition, impl) =>
    addService(definition, {
      ...impl,
      check: (call: unknown, callback: unknown) => {
        if (++checks > answered) return;
        (impl.check as (c: unknown, cb: unknown) => void)(call, callback);
      },
    });
  health.addToServer(server);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return { port, health, server, checks: () => checks };
}

/** A port nothing listens on (bound, then closed). */
async function closedPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const { port } = srv.address() as AddressInfo;
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  return port;
}

describe('docker/smoke-check.mjs', () => {
  let a: HealthServer;
  let b: HealthServer;
  let down: HealthServer;
  let gateway: HttpServer;
  let gw: string;

  beforeAll(async () => {
    [a, b, down] = await Promise.all([healthServer('SERVING'), healthServer('SERVING'), healthServer('NOT_SERVING')]);
    gateway = createServer((req, res) => {
      const status = req.url === '/v1/health' || req.url === '/readyz' ? 200 : 503;
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ status: status === 200 ? 'ok' : 'unavailable', down: status === 200 ? undefined : ['database'] }));
    });
    await new Promise<void>((resolve) => gateway.listen(0, '127.0.0.1', resolve));
    gw = `http://127.0.0.1:${(gateway.address() as AddressInfo).port}`;
  });

  afterAll(async () => {
    for (const s of [a, b, down]) s?.server.forceShutdown();
    await new Promise<void>((resolve) => gateway?.close(() => resolve()));
  });

  it('passes when the gateway answers 2xx and every target SERVING, through ipv4: lists and dns:/// names', async () => {
    const run = await smoke({
      SMOKE_HTTP: `gateway=${gw}/v1/health gateway-readyz=${gw}/readyz`,
      SMOKE_GRPC: `notebook=ipv4:127.0.0.1:${a.port},127.0.0.1:${b.port} identity=dns:///localhost:${a.port} audit=127.0.0.1:${b.port}`,
      SMOKE_TIMEOUT_MS: '10000',
    });
    expect([run.code, run.stderr]).toEqual([0, '']);
    expect(run.stdout).toContain('smoke check: 2 http, 3 grpc');
    for (const name of ['gateway', 'gateway-readyz', 'notebook', 'identity', 'audit'])
      expect(run.stdout).toMatch(new RegExp(`^ok {2}\\s*\\S+\\s+${name} `, 'm'));
    expect(run.stdout).toContain('smoke check passed: 5 checks');
  });

  it('fails naming every check that did not pass, within its timeout', async () => {
    const closed = await closedPort();
    const run = await smoke({
      SMOKE_HTTP: `gateway=${gw}/v1/health gateway-readyz=${gw}/not-ready`,
      SMOKE_GRPC: `notebook=ipv4:127.0.0.1:${a.port} orders=dns:///127.0.0.1:${down.port} jobs=ipv4:127.0.0.1:${closed} webhooks=dns:///no-such-host.invalid:50051`,
      SMOKE_TIMEOUT_MS: '3000',
    });
    expect(run.code).toBe(1);
    expect(run.ms).toBeLessThan(8_000);
    const failed = /smoke check failed: (.*)$/m.exec(run.stderr)?.[1] ?? '';
    expect(failed).toContain(`gateway-readyz (http ${gw}/not-ready: HTTP 503`);
    expect(failed).toContain(`orders (grpc dns:///127.0.0.1:${down.port}: health status NOT_SERVING)`);
    expect(failed).toMatch(new RegExp(`jobs \\(grpc ipv4:127.0.0.1:${closed}: UNAVAILABLE`));
    expect(failed).toMatch(/webhooks \(grpc dns:\/\/\/no-such-host\.invalid:50051: UNAVAILABLE/);
    // what passed is not named a failure
    expect(failed).not.toMatch(/(^|; )(gateway|notebook) \(/);
    expect(run.stdout).toMatch(/^ok .* notebook /m);
  });

  it('retries until a starting service is SERVING', async () => {
    const late = await healthServer('NOT_SERVING');
    try {
      // SERVING once the script has seen NOT_SERVING (not after a set time: a loaded
      // machine may start the script later than that)
      const watching = setInterval(() => {
        if (late.checks() > 0) {
          late.health.setStatus('', 'SERVING');
          clearInterval(watching);
        }
      }, 20);
      const run = await smoke({ SMOKE_GRPC: `telemetry=ipv4:127.0.0.1:${late.port}`, SMOKE_TIMEOUT_MS: '10000' });
      clearInterval(watching);
      expect([run.code, run.stderr]).toEqual([0, '']);
      expect(run.stdout).toMatch(/^ok .* telemetry .*SERVING .*tries\)$/m);
    } finally {
      late.server.forceShutdown();
    }
  });

  it('without SMOKE_GRPC, checks every <NAME>_ADDR variable (as a service pod has them)', async () => {
    const run = await smoke({ NOTEBOOK_ADDR: `dns:///localhost:${a.port}`, ORDERS_ADDR: `ipv4:127.0.0.1:${down.port}`, SMOKE_TIMEOUT_MS: '3000' });
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(/^ok\s.*\snotebook\s+dns:\/\/\/localhost/m);
    expect(run.stderr).toMatch(/smoke check failed: orders \(grpc ipv4:127\.0\.0\.1:\d+: health status NOT_SERVING\)$/m);
  });

  it('names what an earlier try learnt when the last one only ran out of time', async () => {
    // the first try of each is answered (503, NOT_SERVING); the next hangs until the deadline
    const grpcOnce = await healthServer('NOT_SERVING', 1);
    let httpTries = 0;
    const httpOnce = createServer((_req, res) => {
      if (++httpTries > 1) return;
      res.writeHead(503).end('starting');
    });
    await new Promise<void>((resolve) => httpOnce.listen(0, '127.0.0.1', resolve));
    try {
      const run = await smoke({
        SMOKE_HTTP: `gateway=http://127.0.0.1:${(httpOnce.address() as AddressInfo).port}/v1/health`,
        SMOKE_GRPC: `orders=ipv4:127.0.0.1:${grpcOnce.port}`,
        SMOKE_TIMEOUT_MS: '2500',
      });
      expect(run.code).toBe(1);
      expect([httpTries, grpcOnce.checks()]).toEqual([2, 2]);
      const failed = /smoke check failed: (.*)$/m.exec(run.stderr)?.[1] ?? '';
      expect(failed).toMatch(/gateway \(http \S+: HTTP 503 starting\)/);
      expect(failed).toMatch(/orders \(grpc \S+: health status NOT_SERVING\)/);
    } finally {
      grpcOnce.server.forceShutdown();
      httpOnce.closeAllConnections();
      await new Promise<void>((resolve) => httpOnce.close(() => resolve()));
    }
  });

  it('exits 2 when there is nothing (valid) to check', async () => {
    expect((await smoke({})).code).toBe(2);
    expect((await smoke({ SMOKE_GRPC: '', SMOKE_HTTP: '' })).code).toBe(2);
    const bad = await smoke({ SMOKE_HTTP: 'gateway=ftp://x', SMOKE_TIMEOUT_MS: '1000' });
    expect([bad.code, bad.stderr]).toEqual([2, 'smoke check: gateway: ftp://x is not an http(s) URL\n']);
    expect((await smoke({ SMOKE_GRPC: 'a=127.0.0.1:1', SMOKE_TIMEOUT_MS: 'soon' })).code).toBe(2);
  });

  it('is in the image at the path the chart runs it from', () => {
    const dockerfile = readFileSync(join(root, 'docker', 'Dockerfile'), 'utf8');
    const runtime = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));
    expect(runtime).toMatch(/^COPY (--chown=\S+ )?docker\/smoke-check\.mjs \/app\/docker\/smoke-check\.mjs$/m);
    expect(runtime).toMatch(/^WORKDIR \/app$/m);
    const pod = readFileSync(join(root, 'charts', 'lab', 'templates', 'tests', 'smoke-test.yaml'), 'utf8');
    expect(pod).toContain('command: ["node", "docker/smoke-check.mjs"]');
    // the modules it imports are production dependencies: `npm prune --omit=dev` keeps them
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
    const imports = [...readFileSync(script, 'utf8').matchAll(/^import .* from '([^']+)';$/gm)].map((m) => m[1]!).filter((m) => !m.startsWith('node:'));
    expect(imports.sort()).toEqual(['@grpc/grpc-js', 'grpc-health-check']);
    for (const m of imports) expect([m, pkg.dependencies[m]]).toEqual([m, expect.any(String)]);
  });
});
