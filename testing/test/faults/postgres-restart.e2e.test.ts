import { startCluster, type Cluster } from '../../src/cluster';
import { pace, waitFor } from '../../src/waits';
import { describeFault, eventually, postgres, request, seedOrg, type Answer } from './support';

/**
 * PostgreSQL stopped for a few seconds under reads and writes: requests answer 503
 * (never 500, never hang past the 10 s client timeout), the processes' /readyz
 * names the database as down, and everything recovers without a restart.
 */
describeFault('PostgreSQL restart', ['pg_ctlcluster'], () => {
  jest.setTimeout(150_000);
  let cluster: Cluster | undefined;

  afterAll(async () => {
    await cluster?.stop();
  });

  it('answers 503 while the database is away and recovers on its own', async () => {
    cluster = await startCluster({ services: ['identity', 'notebook', 'audit'] });
    const c = cluster;
    const { token } = await seedOrg(c);
    expect((await request(c.url, 'POST', '/v1/samples', { token, body: { name: 'before' } })).status).toBe(201);

    const outage: Answer[] = [];
    let probing = true;
    let n = 0;
    const probe = (async () => {
      while (probing) {
        const [read, write] = await Promise.all([
          request(c.url, 'GET', '/v1/samples?limit=5', { token, timeoutMs: 10_000 }),
          request(c.url, 'POST', '/v1/samples', {
            token,
            body: { name: `during ${n}` },
            headers: { 'Idempotency-Key': `pg-restart-${n++}` },
            timeoutMs: 10_000,
          }),
        ]);
        outage.push(read, write);
        await pace(100); // the probe's cadence
      }
    })();

    let notebookReady: { status: number; body: any } | undefined;
    try {
      postgres.stop();
      notebookReady = await eventually(
        'notebook /readyz reports the database down',
        async () => {
          const r = await request(c.opsUrl('notebook'), 'GET', '/readyz', { timeoutMs: 5_000 });
          return r.status === 503 ? r : undefined;
        },
        15_000,
      );
      // the database stays down while the probe meets it: five rounds of read and write
      const seen = outage.length;
      await waitFor('five probe rounds against the stopped database', () => outage.length >= seen + 10, 30_000);
    } finally {
      postgres.start();
    }
    probing = false;
    await probe;

    expect(notebookReady.body.down).toContain('database');
    const statuses = outage.map((a) => a.status);
    // every answer during the outage is a success (served before/after) or a 503
    const bad = outage.filter((a) => !(a.status >= 200 && a.status < 300) && a.status !== 503);
    expect([...new Set(bad.map((a) => `${a.status} ${a.text}${a.error ?? ''}`))]).toEqual([]);
    expect(statuses).toContain(503);
    const wrong = outage.filter((a) => a.status === 503 && a.body?.error?.code !== 'service_unavailable');
    expect(wrong.map((a) => a.text)).toEqual([]);

    // recovered without a restart: a write succeeds and the probes are green again
    await eventually(
      'a write succeeds after the database returns',
      async () => ((await request(c.url, 'POST', '/v1/samples', { token, body: { name: 'after' } })).status === 201 ? true : undefined),
      15_000,
    );
    for (const name of ['notebook', 'identity', 'audit', 'gateway']) {
      await eventually(`${name} ready again`, async () => ((await request(c.opsUrl(name), 'GET', '/readyz')).status === 200 ? true : undefined), 15_000);
    }
    console.info(
      `postgres restart: statuses during the outage ${JSON.stringify(statuses.reduce<Record<number, number>>((m, s) => ((m[s] = (m[s] ?? 0) + 1), m), {}))}`,
    );
  });
});
