import { telemetry } from '@lab/contracts';
import { createLogger, GrpcServer, isGrpcTarget, newId, RpcClient, systemContext, type Handlers } from '@lab/kit';
import { waitFor } from '../../../testing/src/waits';

/**
 * Calls of one client spread over every replica its target names, and replicas
 * that stop, age out their connections or come back lose no call. Real servers
 * and channels on the loopback interface; telemetry's CreatePoint stands in for
 * any unary method (each replica answers with its own name).
 */
const secret = 'a-secret-of-some-length';
const caller = { ...systemContext('req-1', newId()), user_id: newId(), role: 'admin' };

interface Replica {
  name: string;
  server: GrpcServer;
  port: number;
  calls: number;
  /** calls being served right now */
  inFlight: number;
  /** Holds the calls that arrive from now on until the returned release is called. */
  hold(): () => void;
}

/** A replica answering CreatePoint with its name (once released, while held). */
async function replica(name: string, opts: { port?: number; maxConnectionAgeMs?: number } = {}): Promise<Replica> {
  const server = new GrpcServer({ name, logger: createLogger(name, 'silent'), secret, maxConnectionAgeMs: opts.maxConnectionAgeMs });
  let gate: Promise<void> = Promise.resolve();
  const r: Replica = {
    name,
    server,
    port: 0,
    calls: 0,
    inFlight: 0,
    hold: () => {
      let release!: () => void;
      gate = new Promise((resolve) => (release = resolve));
      return () => {
        gate = Promise.resolve();
        release();
      };
    },
  };
  const handlers = new Proxy({} as Handlers<typeof telemetry.TelemetryServiceService>, {
    get: () => async () => {
      r.calls++;
      r.inFlight++;
      try {
        await gate;
      } finally {
        r.inFlight--;
      }
      // the replica's name in the id of a point (any message would do)
      return { created: true, item: { $case: 'point', value: { id: name, parameter: '', unit: '', active: true } } } satisfies telemetry.ItemResponse;
    },
  });
  server.add(telemetry.TelemetryServiceService, handlers);
  r.port = await server.listen(`127.0.0.1:${opts.port ?? 0}`);
  return r;
}

const clientOf = (target: string) => new RpcClient(telemetry.TelemetryServiceClient, target, { secret, deadlineMs: 5_000 });

/** `n` calls, `concurrency` at a time: the replica names that answered, and the failures. */
async function calls(client: RpcClient<typeof telemetry.TelemetryServiceService>, n: number, concurrency = 4) {
  const answered: string[] = [];
  const failed: string[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next++ < n) {
        try {
          const res = await client.call('createPoint', { org_id: '', point_id: '' }, caller);
          answered.push(res.item?.$case === 'point' ? res.item.value.id : '');
        } catch (err) {
          failed.push((err as Error).message);
        }
      }
    }),
  );
  return { answered, failed };
}

const share = (answered: string[], name: string) => answered.filter((a) => a === name).length / answered.length;

/**
 * Stops a replica gracefully with calls in flight on it: the calls that reach it
 * are held until some are there, the stop begins, and then they are let go, so
 * the stop has calls to finish however fast the replica answers otherwise.
 */
async function stopWithCallsInFlight(r: Replica): Promise<void> {
  const release = r.hold();
  try {
    await waitFor(`calls in flight on ${r.name}`, () => r.inFlight > 0);
    const stopping = r.server.shutdown(5_000);
    release();
    await stopping;
  } finally {
    release();
  }
}

describe('gRPC targets', () => {
  it('accepts the forms grpc-js resolves, with a port, and refuses the rest', () => {
    for (const ok of [
      'notebook:50051',
      '127.0.0.1:50061',
      '[::1]:50051',
      'dns:///lab-notebook-grpc.lab.svc.cluster.local:50051',
      'dns://10.0.0.10:53/notebook:50051',
      'ipv4:127.0.0.1:50061,127.0.0.1:50062',
      'ipv6:[::1]:50061,[::1]:50062',
      'unix:///var/run/notebook.sock',
    ]) {
      expect([ok, isGrpcTarget(ok)]).toEqual([ok, true]);
    }
    for (const bad of [
      'notebook',
      'notebook:',
      'notebook:0',
      'notebook:70000',
      'dns:///notebook',
      'ipv4:127.0.0.1',
      'ipv4:notebook:50051',
      'http://notebook:50051',
      'a b:1',
      '',
    ]) {
      expect([bad, isGrpcTarget(bad)]).toEqual([bad, false]);
    }
  });
});

describe('round-robin calls over replicas', () => {
  jest.setTimeout(30_000);
  const started: Replica[] = [];
  const up = async (...args: Parameters<typeof replica>) => {
    const r = await replica(...args);
    started.push(r);
    return r;
  };
  afterEach(async () => {
    for (const r of started.splice(0)) await r.server.shutdown(500);
  });

  it('spreads one client’s calls evenly over every address of an ipv4: list', async () => {
    const [a, b, c] = [await up('a'), await up('b'), await up('c')];
    const client = clientOf(`ipv4:127.0.0.1:${a.port},127.0.0.1:${b.port},127.0.0.1:${c.port}`);
    try {
      const { answered, failed } = await calls(client, 300);
      expect(failed).toEqual([]);
      // round_robin: a third each, give or take the first calls while connecting
      const shares = Object.fromEntries(['a', 'b', 'c'].map((n) => [n, share(answered, n)]));
      expect([shares, Object.values(shares).every((s) => s > 0.25)]).toEqual([shares, true]);
    } finally {
      client.close();
    }
  });

  it('takes dns:/// targets (every address of the name)', async () => {
    const a = await up('a');
    const client = clientOf(`dns:///localhost:${a.port}`);
    try {
      expect((await calls(client, 10)).failed).toEqual([]);
    } finally {
      client.close();
    }
  });

  it('loses no call when a replica stops gracefully in the middle of the load', async () => {
    const [a, b] = [await up('a'), await up('b')];
    const client = clientOf(`ipv4:127.0.0.1:${a.port},127.0.0.1:${b.port}`);
    try {
      const load = calls(client, 400, 8);
      await waitFor('a quarter of the load answered, b serving part of it', () => a.calls + b.calls >= 100 && b.calls > 0);
      await stopWithCallsInFlight(b);
      const { answered, failed } = await load;
      expect(failed).toEqual([]);
      expect(answered.length).toBe(400);
      const bAfterStop = b.calls;
      expect((await calls(client, 50)).failed).toEqual([]);
      expect(b.calls).toBe(bAfterStop);
    } finally {
      client.close();
    }
  });

  it('loses no call when the server closes connections at their maximum age', async () => {
    const a = await up('a', { maxConnectionAgeMs: 200 });
    const b = await up('b', { maxConnectionAgeMs: 200 });
    const client = clientOf(`ipv4:127.0.0.1:${a.port},127.0.0.1:${b.port}`);
    try {
      const started = Date.now();
      let total = 0;
      // about 10 connection ages (with their jitter) on each replica
      while (Date.now() - started < 2_000) {
        const { failed, answered } = await calls(client, 40, 4);
        expect(failed).toEqual([]);
        total += answered.length;
      }
      expect(total).toBeGreaterThan(100);
    } finally {
      client.close();
    }
  });

  it('loses no call in a rolling restart: the next replica stops the moment the previous one is back', async () => {
    let a = await up('a');
    let b = await up('b');
    const client = clientOf(`ipv4:127.0.0.1:${a.port},127.0.0.1:${b.port}`);
    try {
      const load = calls(client, 1_500, 8);
      // each replica in turn stops gracefully and a new one starts on its address;
      // the other stops as soon as it is up, before the client has reconnected to it
      for (const name of ['a', 'b', 'a'] as const) {
        const base = a.calls + b.calls;
        await waitFor(`100 more calls answered before ${name} restarts`, () => a.calls + b.calls >= base + 100);
        const old = name === 'a' ? a : b;
        await stopWithCallsInFlight(old);
        started.splice(started.indexOf(old), 1);
        const fresh = await up(name, { port: old.port });
        if (name === 'a') a = fresh;
        else b = fresh;
      }
      const { failed, answered } = await load;
      expect(failed).toEqual([]);
      expect(answered.length).toBe(1_500);
    } finally {
      client.close();
    }
  });

  it('moves calls off a replica killed outright and back to it within a second of its return', async () => {
    const a = await up('a');
    let b = await up('b');
    const port = b.port;
    const client = clientOf(`ipv4:127.0.0.1:${a.port},127.0.0.1:${port}`);
    try {
      expect((await calls(client, 20)).failed).toEqual([]);
      b.server.server.forceShutdown();
      started.splice(started.indexOf(b), 1);
      // the next calls go to the live replica only (a call already picked for the dead one may fail)
      await calls(client, 10);
      const after = await calls(client, 50);
      expect(after.failed).toEqual([]);
      expect(new Set(after.answered)).toEqual(new Set(['a']));

      b = await up('b', { port });
      const back = Date.now();
      // reconnect backoff of at most 1 s: the replica gets calls again promptly
      while (b.calls === 0 && Date.now() - back < 5_000) await calls(client, 4, 1);
      expect(b.calls).toBeGreaterThan(0);
      expect(Date.now() - back).toBeLessThan(3_000);
    } finally {
      client.close();
    }
  });
});
