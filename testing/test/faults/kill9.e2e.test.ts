import { startCluster, type Cluster } from '../../src/cluster';
import { answersSince, describeFault, eventQueue, eventually, query, sampleAuditCounts, seedOrg, writeLoad } from './support';

/**
 * SIGKILL of a service process in the middle of a write load: no write answered
 * 2xx is lost, every committed sample's event leaves the outbox (at least once),
 * and the audit log ends with exactly one record per sample.
 */
describeFault('kill -9 during writes', [], () => {
  jest.setTimeout(150_000);
  let cluster: Cluster | undefined;

  afterAll(async () => {
    await cluster?.stop();
  });

  it('loses no committed write, event or audit record when notebook, audit and identity are killed', async () => {
    cluster = await startCluster({ services: ['identity', 'notebook', 'audit'] });
    const { orgId, token } = await seedOrg(cluster);
    const events = await eventQueue(process.env.AMQP_URL!, cluster.exchange, ['sample.created']);
    try {
      const load = writeLoad(cluster.url, token, 8);
      let at = Date.now();
      await answersSince(load.result, at, 'created', 30);
      at = Date.now();
      await cluster.kill('notebook');
      await answersSince(load.result, at, 'failed', 1);
      await cluster.restart('notebook');
      at = Date.now();
      await answersSince(load.result, at, 'created', 30);
      // audit down: writes go on, their audit records wait in the outbox
      at = Date.now();
      await cluster.kill('audit');
      await answersSince(load.result, at, 'created', 10);
      await cluster.restart('audit');
      at = Date.now();
      await answersSince(load.result, at, 'created', 30);
      // identity: the gateway's principal cache carries warm tokens across its restart
      at = Date.now();
      await cluster.kill('identity');
      await answersSince(load.result, at, 'created', 10);
      await cluster.restart('identity');
      at = Date.now();
      await answersSince(load.result, at, 'created', 30);
      const result = await load.stop();

      expect(result.abandoned).toBe(0);
      expect(result.created.length).toBeGreaterThan(0);
      // the kill must have been seen by the writers, or the test proved nothing
      expect(Object.keys(result.statuses).some((s) => Number(s) === 0 || Number(s) >= 500)).toBe(true);
      const created = new Set(result.created);
      expect(created.size).toBe(result.created.length);

      const rows = await query<{ id: string }>(cluster.databaseUrl, 'select id::text from notebook.samples where org_id = $1', [orgId]);
      const stored = new Set(rows.map((r) => r.id));
      for (const id of created) expect(stored.has(id)).toBe(true);

      const seen = await events.collect(stored, 60_000);
      expect([...seen.dataIds].sort()).toEqual([...stored].sort());
      expect(seen.byEventId.size).toBe(stored.size);

      const audit = await eventually(
        'one audit record per sample',
        async () => {
          const counts = await sampleAuditCounts(cluster!.databaseUrl, orgId);
          return counts.size === stored.size ? counts : undefined;
        },
        60_000,
      );
      expect([...audit.keys()].sort()).toEqual([...stored].sort());
      for (const n of audit.values()) expect(n).toBe(1);
      console.info(
        `kill -9: ${created.size} writes answered 2xx, statuses ${JSON.stringify(result.statuses)}, ${seen.deliveries} deliveries of ${seen.byEventId.size} events`,
      );
    } finally {
      await events.delete();
    }
  });
});
