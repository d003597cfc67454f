import { sql } from 'drizzle-orm';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  AmqpBus,
  createLogger,
  createMetricsServer,
  dependencyReadiness,
  Housekeeping,
  MemoryBus,
  openDatabase,
  probe,
  runService,
  serveMetrics,
  type Bus,
  type Readiness,
} from '@lab/kit';
import { dropFreshDatabases, freshDatabaseUrl, uniqueExchange } from '../../../testing/src/backing';
import { waitFor } from '../../../testing/src/waits';

const log = createLogger('test', 'silent');
const servers: Server[] = [];
let dataDir: string;

async function opsServer(readiness: Readiness): Promise<string> {
  const server = createMetricsServer(readiness);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  servers.push(server);
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function get(url: string): Promise<{ status: number; body: any; text: string }> {
  const res = await fetch(url);
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  return { status: res.status, body, text };
}

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'lab-ops-'));
});

afterAll(async () => {
  for (const s of servers) s.close();
  await dropFreshDatabases();
  await rm(dataDir, { recursive: true, force: true });
});

describe('operations port', () => {
  it('serves /livez, /metrics and 404 elsewhere', async () => {
    const base = await opsServer(async () => ({}));
    expect(await get(`${base}/livez`)).toMatchObject({ status: 200, body: { status: 'ok' } });
    const m = await get(`${base}/metrics`);
    expect(m.status).toBe(200);
    expect(m.text).toContain('# TYPE lab_http_request_duration_seconds histogram');
    expect(m.text).toContain('lab_outbox_backlog');
    expect((await get(`${base}/nope`)).status).toBe(404);
  });

  it('a listening operations server survives errors of its listener (a failed accept, EMFILE)', async () => {
    // a free port: serveMetrics takes 0 as "off", not as "any port"
    const probeServer = createServer().listen(0, '127.0.0.1');
    await once(probeServer, 'listening');
    const port = (probeServer.address() as AddressInfo).port;
    await new Promise((r) => probeServer.close(r));
    const server = (await serveMetrics(port, { host: '127.0.0.1', log }))!;
    servers.push(server);
    const acceptFailed = () => Object.assign(new Error('accept EMFILE'), { code: 'EMFILE', syscall: 'accept' });
    // with no listener, emit() throws: the process would crash
    expect(() => {
      for (let i = 0; i < 3; i++) server.emit('error', acceptFailed());
    }).not.toThrow();
    expect((await get(`http://127.0.0.1:${port}/livez`)).status).toBe(200);
  });

  it('port 0 turns the listener off', async () => {
    expect(await serveMetrics(0, { log })).toBeUndefined();
  });

  it("runs the service's retention rules with its housekeeping, and a failed pass does not stop the next", async () => {
    const bus = new MemoryBus(log);
    const empty = await mkdtemp(join(tmpdir(), 'lab-ops-migrations-'));
    const stopped = jest.spyOn(Housekeeping.prototype, 'stop');
    let passes = 0;
    const svc = await runService(
      {
        name: 'housekeeping-test',
        schema: 'housekeeping_test',
        migrationsDir: empty,
        register: async () => undefined,
        retention: (deps) => [
          [
            'test rule',
            async () => {
              passes++;
              if (passes === 1) throw new Error('first pass fails');
              await deps.db.rows(sql`select 1`);
              return 0;
            },
          ],
        ],
      },
      { log, bus, secret: 'x'.repeat(32), databaseUrl: await freshDatabaseUrl(), dataDir, grpcAddress: '127.0.0.1:0', housekeepingMs: 50 },
    );
    try {
      await waitFor('three housekeeping passes (the first one failing)', () => passes >= 3, 5_000);
    } finally {
      await svc.stop();
      await bus.close();
    }
    // stopped with the service: after Housekeeping.stop() no pass runs and no timer
    // is left (held on a faked clock in housekeeping.unit.test.ts)
    expect(stopped).toHaveBeenCalledTimes(1);
    stopped.mockRestore();
  });

  it('a running service is ready while its database and bus are up, and 503 naming the database once it is gone', async () => {
    const bus: Bus = process.env.AMQP_URL ? await AmqpBus.connect(process.env.AMQP_URL, uniqueExchange(), log) : new MemoryBus(log);
    const empty = await mkdtemp(join(tmpdir(), 'lab-ops-migrations-'));
    const svc = await runService(
      { name: 'ops-test', schema: 'ops_test', migrationsDir: empty, register: async () => undefined },
      { log, bus, secret: 'x'.repeat(32), databaseUrl: await freshDatabaseUrl(), dataDir, grpcAddress: '127.0.0.1:0' },
    );
    const base = await opsServer(svc.readiness);
    try {
      expect(await get(`${base}/readyz`)).toMatchObject({ status: 200, body: { status: 'ok', checks: { database: true, bus: true } } });
      await svc.deps.db.close();
      const down = await get(`${base}/readyz`);
      expect(down).toMatchObject({ status: 503, body: { status: 'unavailable', checks: { database: false, bus: true }, down: ['database'] } });
    } finally {
      await svc.stop().catch(() => undefined);
      await bus.close();
      await rm(empty, { recursive: true, force: true });
    }
  });

  it('is 503 for a database URL that points at a closed port', async () => {
    const db = await openDatabase({ url: 'postgres://postgres@127.0.0.1:1/nothing' });
    const base = await opsServer(dependencyReadiness({ db, bus: { connected: true } }));
    try {
      expect(await get(`${base}/readyz`)).toMatchObject({ status: 503, body: { down: ['database'] } });
    } finally {
      await db.close();
    }
  });

  it('is 503 naming the bus when it is disconnected', async () => {
    const bus = process.env.AMQP_URL ? await AmqpBus.connect(process.env.AMQP_URL, uniqueExchange(), log) : undefined;
    await bus?.close();
    const base = await opsServer(dependencyReadiness({ db: { ping: async () => undefined }, bus: bus ?? { connected: false } }));
    expect(await get(`${base}/readyz`)).toMatchObject({ status: 503, body: { checks: { database: true, bus: false }, down: ['bus'] } });
  });

  it('counts a check that throws or never answers as down', async () => {
    expect(await probe(async () => undefined)).toBe(true);
    expect(await probe(async () => Promise.reject(new Error('no')))).toBe(false);
    expect(await probe(() => new Promise(() => undefined), 20)).toBe(false);
  });
});
