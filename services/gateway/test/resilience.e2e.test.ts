import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, MemoryBus } from '@lab/kit';
import { dropFreshDatabases, freshDatabaseUrl } from '@lab/testing';
import { startGateway } from '../src/index';
import { RateLimiter } from '@lab/rate-limits';
import { call } from './http';

const log = createLogger('test', 'silent');
// Nothing listens on port 1.
const DEAD = '127.0.0.1:1';

let dataDir: string;

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'lab-gw-'));
});

afterAll(async () => {
  await dropFreshDatabases();
  await rm(dataDir, { recursive: true, force: true });
});

/** A gateway whose identity and notebook services are not there. */
async function gatewayBeforeDeadServices() {
  const bus = new MemoryBus(log);
  const gw = await startGateway({
    port: 0,
    host: '127.0.0.1',
    log,
    secret: 'a-secret-of-sixteen-chars',
    operatorToken: 'operator-token-for-tests',
    databaseUrl: await freshDatabaseUrl(),
    dataDir,
    bus,
    services: { identity: DEAD, notebook: DEAD },
  });
  return { bus, gw };
}

it('answers 503 in the error envelope when identity does not answer', async () => {
  const { bus, gw } = await gatewayBeforeDeadServices();
  try {
    const r = await call(gw.url, 'GET', '/v1/samples', {
      token: 'pat_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx',
      headers: { 'x-org-id': '0190a0c8-0000-7000-8000-000000000001' },
    });
    expect(r.status).toBe(503);
    expect(r.body.error.code).toBe('service_unavailable');
    expect((await call(gw.url, 'GET', '/v1/health')).status).toBe(200);
  } finally {
    await gw.stop();
    await bus.close();
  }
});

it('fails open when Redis does not answer', async () => {
  const limiter = new RateLimiter(log, `redis://${DEAD}`);
  try {
    const state = await limiter.consume('token-1', { per_minute: 1, per_hour: 1 });
    expect(state.limit).toBe(1);
    await expect(limiter.consume('token-1', { per_minute: 1, per_hour: 1 })).resolves.toBeDefined();
  } finally {
    await limiter.close();
  }
});

it('counts in memory without Redis', async () => {
  const limiter = new RateLimiter(log);
  expect(await limiter.consume('token-2', { per_minute: 2, per_hour: 10 })).toEqual({ limit: 2, remaining: 1 });
  expect(await limiter.consume('token-2', { per_minute: 2, per_hour: 10 })).toEqual({ limit: 2, remaining: 0 });
  await expect(limiter.consume('token-2', { per_minute: 2, per_hour: 10 })).rejects.toMatchObject({ code: 'rate_limited' });
  await limiter.close();
});

it('survives errors of its listener after it started (a failed accept, EMFILE)', async () => {
  const { bus, gw } = await gatewayBeforeDeadServices();
  try {
    const acceptFailed = () => Object.assign(new Error('accept EMFILE'), { code: 'EMFILE', syscall: 'accept' });
    // net.Server emits these on the listening server; with no listener, emit() throws (the process crashes).
    // More than one: a failed accept can happen any number of times.
    expect(() => {
      for (let i = 0; i < 3; i++) gw.server.emit('error', acceptFailed());
    }).not.toThrow();
    expect((await call(gw.url, 'GET', '/v1/health')).status).toBe(200);
  } finally {
    await gw.stop();
    await bus.close();
  }
});
