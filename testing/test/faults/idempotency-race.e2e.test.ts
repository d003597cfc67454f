import { startCluster, type Cluster } from '../../src/cluster';
import { describeFault, eventQueue, query, seedOrg } from './support';

/** Twenty concurrent requests with one Idempotency-Key: one write, twenty identical answers. */
describeFault('one Idempotency-Key, 20 concurrent requests', [], () => {
  jest.setTimeout(90_000);
  let cluster: Cluster | undefined;

  afterAll(async () => {
    await cluster?.stop();
  });

  it('writes once and answers every request with the same status and body', async () => {
    cluster = await startCluster({ services: ['identity', 'notebook', 'audit'] });
    const { orgId, token } = await seedOrg(cluster);
    const events = await eventQueue(process.env.AMQP_URL!, cluster.exchange, ['sample.created']);
    try {
      const key = `race-${Date.now()}-key`;
      const answers = await Promise.all(
        Array.from({ length: 20 }, async () => {
          const res = await fetch(`${cluster!.url}/v1/samples`, {
            method: 'POST',
            headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'Idempotency-Key': key },
            body: JSON.stringify({ name: 'raced sample', type: 'race' }),
            signal: AbortSignal.timeout(20_000),
          });
          return { status: res.status, body: await res.text() };
        }),
      );
      expect(answers[0].status).toBe(201);
      for (const a of answers) expect(a).toEqual(answers[0]);

      const rows = await query<{ id: string }>(cluster.databaseUrl, 'select id::text from notebook.samples where org_id = $1', [orgId]);
      expect(rows.map((r) => r.id)).toEqual([JSON.parse(answers[0].body).data.id]);
      const seen = await events.collect([rows[0].id], 20_000);
      expect(seen.byEventId.size).toBe(1);
      expect([...seen.dataIds]).toEqual([rows[0].id]);
    } finally {
      await events.delete();
    }
  });
});
