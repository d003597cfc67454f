import { randomUUID } from 'node:crypto';
import pino from 'pino';
import { logErr, metrics } from '@lab/kit';
import { cuttableProxy, startStack, type CuttableProxy, type Stack } from '@lab/testing';

/** host and port of a host:port address */
const hostAndPort = (address: string): [string, number] => [address.slice(0, address.lastIndexOf(':')), Number(address.slice(address.lastIndexOf(':') + 1))];
import { startGateway, type RunningGateway } from '../src/index';
import { RateLimiter } from '@lab/rate-limits';
import { call, eventually } from './http';

/**
 * While a domain service is away, every 5xx the gateway answers is one log line
 * with its request id, route, status and upstream cause, and the outage itself is
 * two lines (it began; it ended after N failures), not a line per failed call.
 * The service is "stopped" by cutting a TCP proxy in front of it: the gateway's
 * calls fail as they do when its pods are gone, and it comes back on the same address.
 */

type Line = Record<string, any> & { msg: string; level: number };

let stack: Stack;
let proxy: CuttableProxy;
let gw: RunningGateway;
const lines: Line[] = [];
let token: string;

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'notebook'] });
  proxy = await cuttableProxy(...hostAndPort(stack.services.notebook!));
  // the lines as the process writes them (JSON), kept for the assertions
  // debug: the refusals' lines too (the last test)
  const log = pino({ level: 'debug', serializers: { err: logErr } }, { write: (l: string) => void lines.push(JSON.parse(l) as Line) });
  gw = await startGateway({
    port: 0,
    host: '127.0.0.1',
    log,
    secret: stack.secret,
    operatorToken: stack.operatorToken,
    databaseUrl: stack.databaseUrl,
    dataDir: stack.dataDir,
    bus: stack.bus,
    services: { ...stack.services, notebook: proxy.address },
  });
  const org = await stack.admin.createOrg();
  token = (await stack.admin.createApiKey(org.id, { scopes: ['read', 'write'] })).token;
}, 120_000);

afterAll(async () => {
  await gw?.stop();
  await proxy?.close();
  await stack?.stop();
});

const samples = (requestId?: string) => call(gw.url, 'GET', '/v1/samples', { token, headers: requestId ? { 'X-Request-Id': requestId } : {} });
const serverErrorLines = () => lines.filter((l) => typeof l.status === 'number' && l.status >= 500);
const notebookState = (state: string) => lines.filter((l) => l.dependency === 'notebook' && l.state === state);

it('logs each 5xx once with its cause, and the outage of the service as two lines with a count', async () => {
  expect((await samples()).status).toBe(200);
  expect(serverErrorLines()).toEqual([]);

  proxy.cut();
  const ids = Array.from({ length: 5 }, () => `srv-err-${randomUUID()}`);
  for (const id of ids) {
    const r = await samples(id);
    expect([id, r.status, r.body?.error?.code]).toEqual([id, 503, 'service_unavailable']);
  }
  // a line is written when its answer has gone out: wait for the last one
  await eventually(async () => (serverErrorLines().some((l) => l.request_id === ids.at(-1)) ? true : undefined));

  for (const id of ids) {
    const mine = serverErrorLines().filter((l) => l.request_id === id);
    expect(mine).toHaveLength(1);
    expect(mine[0]).toMatchObject({
      method: 'GET',
      route: '/v1/samples',
      status: 503,
      cause: { kind: 'upstream', service: 'notebook', grpc_code: 'UNAVAILABLE', grpc_details: expect.any(String), error_code: 'service_unavailable' },
    });
    expect(mine[0]!.msg).toMatch(/^503 GET \/v1\/samples: notebook answered UNAVAILABLE/);
  }
  // no 5xx line without its request
  expect(
    serverErrorLines()
      .map((l) => l.request_id)
      .sort(),
  ).toEqual([...ids].sort());
  // the outage: one line when it began, none per failed call
  expect(notebookState('unavailable').map((l) => l.msg)).toEqual(['notebook unavailable']);

  proxy.restore();
  await eventually(async () => ((await samples()).status === 200 ? true : undefined), 30_000);
  const back = notebookState('available');
  expect(back).toHaveLength(1);
  expect(back[0]!.failures).toBeGreaterThanOrEqual(ids.length);
  expect(back[0]!.msg).toBe(`notebook available again after ${back[0]!.failures} failures`);
  expect(notebookState('unavailable')).toHaveLength(1);
}, 120_000);

it('a second outage is logged again: the state starts over once the service is back', async () => {
  const before = notebookState('unavailable').length;
  proxy.cut();
  const r = await samples(`srv-err-${randomUUID()}`);
  expect(r.status).toBe(503);
  expect(notebookState('unavailable')).toHaveLength(before + 1);
  proxy.restore();
  await eventually(async () => ((await samples()).status === 200 ? true : undefined), 30_000);
  expect(notebookState('available').at(-1)).toMatchObject({
    failures: expect.any(Number),
    msg: expect.stringMatching(/^notebook available again after \d+ failures$/),
  });
}, 120_000);

it('a rate-limit store that is down is one line however many requests it fails, and each failed command is counted', async () => {
  const storeLines: Line[] = [];
  // debug: the refusals' lines too (the last test)
  const log = pino({ level: 'debug', serializers: { err: logErr } }, { write: (l: string) => void storeLines.push(JSON.parse(l) as Line) });
  // nothing listens on port 1
  const limiter = new RateLimiter(log, 'redis://127.0.0.1:1');
  const errors = async () => (await metrics().rateLimitBackendErrors.get()).values.reduce((a, v) => a + v.value, 0);
  const before = await errors();
  try {
    for (let i = 0; i < 20; i++) await limiter.consume(`token-${i}`, { per_minute: 10, per_hour: 100 });
    expect(await errors()).toBeGreaterThanOrEqual(before + 20);
    expect(storeLines.filter((l) => l.dependency === 'rate limit store' && l.state === 'unavailable').map((l) => l.msg)).toEqual([
      'rate limit store unavailable',
    ]);
    expect(storeLines.filter((l) => /rate limit/.test(l.msg))).toHaveLength(1);
  } finally {
    await limiter.close();
  }
});

it('logs a refused request at debug level with its request id, route, status and code, so an integrator can be answered', async () => {
  const requestId = randomUUID();
  const refused = await call(gw.url, 'POST', '/v1/samples', { token, body: { name: 42 }, headers: { 'X-Request-Id': requestId } });
  expect(refused.status).toBe(400);
  const line = await eventually(() => Promise.resolve(lines.find((l) => l.request_id === requestId)), 10_000, 'the refusal line');
  expect(line).toMatchObject({ level: 20, method: 'POST', route: '/v1/samples', status: 400, code: refused.body.error.code });
});
