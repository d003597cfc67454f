import { startCluster, type Cluster } from '../../src/cluster';
import { answersSince, describeFault, eventQueue, query, seedOrg, writeLoad } from './support';

/**
 * SIGKILL of the gateway in the middle of a write load. The writers retry with
 * the same Idempotency-Key as soon as the restarted gateway answers. No write
 * answered 2xx is lost, every stored sample's event reaches RabbitMQ, and a write
 * the notebook committed just before the gateway died is not made twice: its
 * retry meets the notebook's receipt of it and gets the first answer, marked as
 * a replay (the gateway keeps nothing about a write that could be left behind).
 */
describeFault('kill -9 of the gateway', [], () => {
  jest.setTimeout(150_000);
  let cluster: Cluster | undefined;

  afterAll(async () => {
    await cluster?.stop();
  });

  it('loses no acknowledged write or event when the gateway is killed', async () => {
    cluster = await startCluster({ services: ['identity', 'notebook', 'audit'] });
    const { orgId, token } = await seedOrg(cluster);
    const events = await eventQueue(process.env.AMQP_URL!, cluster.exchange, ['sample.created']);
    try {
      const load = writeLoad(cluster.url, token, 8, 90_000);
      let result;
      try {
        let at = Date.now();
        await answersSince(load.result, at, 'created', 30);
        at = Date.now();
        await cluster.kill('gateway');
        await answersSince(load.result, at, 'failed', 1);
        await cluster.restart('gateway');
        at = Date.now();
        await answersSince(load.result, at, 'created', 30);
      } finally {
        result = await load.stop();
      }
      expect(result.abandoned).toBe(0);
      // the writers saw the gateway go (no answer), or the test proved nothing
      expect(result.statuses[0] ?? 0).toBeGreaterThan(0);
      const created = new Set(result.created);
      expect(created.size).toBe(result.created.length);

      const rows = await query<{ id: string }>(cluster.databaseUrl, 'select id::text from notebook.samples where org_id = $1', [orgId]);
      const stored = new Set(rows.map((r) => r.id));
      for (const id of created) expect(stored.has(id)).toBe(true);
      // a write in flight when the gateway died and retried after the takeover
      // finds the notebook's receipt of the first write: nothing runs twice
      expect(stored.size).toBe(created.size);

      const seen = await events.collect(stored, 60_000);
      expect([...seen.dataIds].sort()).toEqual([...stored].sort());
      expect(seen.byEventId.size).toBe(stored.size);
      console.info(`kill -9 gateway: ${created.size} writes answered 2xx, statuses ${JSON.stringify(result.statuses)}`);
    } finally {
      await events.delete();
    }
  });
});
