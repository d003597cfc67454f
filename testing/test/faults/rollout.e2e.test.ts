import { randomUUID } from 'node:crypto';
import { startBalancer, type Balancer } from '../../src/balancer';
import { startCluster, type Cluster } from '../../src/cluster';
import { waitFor } from '../../src/waits';
import { describeFault, query, seedOrg, type Answer } from './support';

/**
 * A rollout of every component under load, as Kubernetes does it: two replicas of
 * the gateway and of each domain service, a balancer in front of the gateways
 * that, like endpoint propagation, goes on sending new connections to a replica
 * for 5 s after its stop began, the services' callers given each service's
 * addresses as one target (a headless Service's), and each replica replaced in
 * turn as a Deployment with maxSurge 1 / maxUnavailable 0 does (successor ready,
 * then SIGTERM). The processes keep their default drain (LAB_SHUTDOWN_DRAIN_MS
 * unset). Every request counts: a client's retry would hide a dropped one, so none
 * is retried, and not one may fail; every acknowledged write is there once.
 *
 * Run with LAB_SHUTDOWN_DRAIN_MS=0 it fails: the stopping gateway refuses what the
 * balancer still sends it (decision 053, docs/benchmarks.md).
 */
const SERVICES = ['identity', 'notebook', 'audit'];
/** how long the balancer goes on sending to a replica after its stop began */
const ENDPOINT_LAG_MS = 5_000;
const WRITERS = 6;
const READERS = 2;

interface Outcome {
  requests: number;
  /** every request not answered as it should be: no answer, a 5xx, a 4xx */
  failures: string[];
  /** sample ids of the writes answered 201 */
  acknowledged: string[];
  /** the name of every write sent, answered or not: each may be stored once at most */
  sent: string[];
}

describeFault('a rolling restart of every component behind a lagging balancer', [], () => {
  jest.setTimeout(420_000);
  let cluster: Cluster;
  let balancer: Balancer;
  let org: { orgId: string; token: string };

  beforeAll(async () => {
    cluster = await startCluster({
      services: SERVICES,
      replicas: Object.fromEntries([...SERVICES, 'gateway'].map((s) => [s, 2])),
      rollouts: true,
      startTimeoutMs: 60_000,
    });
    org = await seedOrg(cluster);
    balancer = await startBalancer(
      cluster.urls.map((u) => Number(new URL(u).port)),
      { removalLagMs: ENDPOINT_LAG_MS },
    );
  });

  afterAll(async () => {
    await balancer?.close();
    await cluster?.stop();
  });

  it('drops no request and loses or doubles no acknowledged write', async () => {
    const started = Date.now();
    const load = steadyLoad(balancer.url, org.token);
    await waitFor('the load going', () => load.outcome.acknowledged.length >= 20, { timeoutMs: 60_000, intervalMs: 50 });

    for (const service of [...SERVICES, 'gateway']) {
      for (const replica of cluster.replicasOf(service)) {
        const hooks = service === 'gateway' ? { ready: (port: number) => balancer.add(port), stopping: (port: number) => balancer.remove(port) } : {};
        await cluster.roll(replica, hooks);
        // requests reach the new set before the next replica goes, as a rollout's pace would allow
        const before = load.outcome.requests;
        await waitFor(`requests answered after ${replica} rolled`, () => load.outcome.requests >= before + 20, { timeoutMs: 60_000, intervalMs: 50 });
      }
    }
    const outcome = await load.stop();
    const seconds = (Date.now() - started) / 1000;
    console.info(
      `rollout of ${SERVICES.length + 1} components x 2 replicas under ${WRITERS + READERS} clients: ${outcome.requests} requests in ${seconds.toFixed(0)} s, ` +
        `${outcome.failures.length} failed, ${outcome.acknowledged.length} writes acknowledged; balancer: ${balancer.refused} connections refused, ` +
        `drain ${process.env.LAB_SHUTDOWN_DRAIN_MS ?? 'default'}`,
    );

    // read back by name: each write sent is stored once at most, and each acknowledged one is there
    const rows = await query<{ id: string; name: string }>(
      cluster.databaseUrl,
      'select id::text, name from notebook.samples where org_id = $1 and name = any($2)',
      [org.orgId, outcome.sent],
    );
    const perName = new Map<string, number>();
    for (const r of rows) perName.set(r.name, (perName.get(r.name) ?? 0) + 1);
    expect([...perName].filter(([, n]) => n > 1)).toEqual([]);
    const stored = new Set(rows.map((r) => r.id));
    expect(outcome.acknowledged.filter((id) => !stored.has(id))).toEqual([]);
    expect(new Set(outcome.acknowledged).size).toBe(outcome.acknowledged.length);

    expect(outcome.failures.slice(0, 20)).toEqual([]);
    expect(outcome.failures.length).toBe(0);
  });

  /** One request through the balancer; a request without an answer is status 0 with its cause (refused, reset). */
  async function request(
    base: string,
    method: string,
    path: string,
    opts: { token: string; body?: unknown; headers?: Record<string, string> },
  ): Promise<Answer> {
    const headers: Record<string, string> = { authorization: `Bearer ${opts.token}`, ...opts.headers };
    if (opts.body !== undefined) headers['content-type'] = 'application/json';
    try {
      const res = await fetch(`${base}${path}`, {
        method,
        headers,
        body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
        signal: AbortSignal.timeout(10_000),
      });
      const text = await res.text();
      return { status: res.status, body: res.headers.get('content-type')?.includes('json') ? JSON.parse(text) : undefined, text };
    } catch (err) {
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      return { status: 0, body: undefined, text: '', error: `${(err as Error).message}: ${cause?.code ?? cause?.message ?? 'no cause'}` };
    }
  }

  /**
   * WRITERS clients creating samples (each with an Idempotency-Key of its own) and
   * READERS reading back what was acknowledged, one request after another, through
   * the balancer, until stop(). Nothing is retried.
   */
  function steadyLoad(base: string, token: string) {
    const outcome: Outcome = { requests: 0, failures: [], acknowledged: [], sent: [] };
    let stopping = false;
    const record = (what: string, r: { status: number; text: string; error?: string }, expected: number) => {
      outcome.requests++;
      if (r.status !== expected) outcome.failures.push(`${what} -> ${r.status} ${r.error ?? r.text.slice(0, 160)}`);
    };
    const write = async () => {
      const key = `roll-${randomUUID()}`;
      const name = `rollout ${key}`;
      outcome.sent.push(name);
      const r = await request(base, 'POST', '/v1/samples', { token, body: { name, type: 'rollout' }, headers: { 'Idempotency-Key': key } });
      record('POST /v1/samples', r, 201);
      if (r.status === 201) outcome.acknowledged.push(r.body.data.id);
    };
    const read = async (n: number) => {
      const ids = outcome.acknowledged;
      if (n % 2 === 0 && ids.length) {
        const id = ids[n % ids.length]!;
        const r = await request(base, 'GET', `/v1/samples/${id}`, { token });
        record('GET /v1/samples/:id', r, 200);
        if (r.status === 200 && r.body.data.id !== id) outcome.failures.push(`GET /v1/samples/${id} answered ${r.body.data.id}`);
      } else {
        record('GET /v1/samples', await request(base, 'GET', '/v1/samples?limit=5', { token }), 200);
      }
    };
    const loops = [
      ...Array.from({ length: WRITERS }, async () => {
        while (!stopping) await write();
      }),
      ...Array.from({ length: READERS }, async () => {
        for (let n = 0; !stopping; n++) await read(n);
      }),
    ];
    return {
      outcome,
      stop: async () => {
        stopping = true;
        await Promise.all(loops);
        return outcome;
      },
    };
  }
});
