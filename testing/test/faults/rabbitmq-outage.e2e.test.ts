import { startCluster, type Cluster } from '../../src/cluster';
import { answersSince, describeFault, eventQueue, eventually, query, rabbit, sampleAuditCounts, seedOrg, sleep, writeLoad } from './support';

/** How long the broker app is away: the subject (see below), beyond every publish/reconnect timeout involved. */
const OUTAGE_MS = 15_000;

/**
 * The broker app away for 15 s under a write load (the issue names 30 s; 15 s keeps
 * CI time down and is still far beyond every publish/reconnect timeout involved):
 * writes keep answering 2xx because they only touch the database (the outbox),
 * the outboxes drain once the broker is back, and no event or audit record is lost.
 */
describeFault('RabbitMQ away for a while', ['rabbitmqctl'], () => {
  jest.setTimeout(170_000);
  let cluster: Cluster | undefined;

  afterAll(async () => {
    await cluster?.stop();
  });

  it('keeps accepting writes and delivers every event after the broker returns', async () => {
    cluster = await startCluster({ services: ['identity', 'notebook', 'audit'] });
    const { orgId, token } = await seedOrg(cluster);
    // bound before the outage, durable with x-expires: survives the broker app restart
    const events = await eventQueue(process.env.AMQP_URL!, cluster.exchange, ['sample.created']);
    let stoppedAt = 0;
    let startedAt = 0;
    try {
      const load = writeLoad(cluster.url, token, 4);
      try {
        await answersSince(load.result, Date.now(), 'created', 20);
        rabbit.stopApp();
        stoppedAt = Date.now();
        // deliberate wait: the outage's length is what the test is about
        await sleep(OUTAGE_MS);
      } finally {
        rabbit.startApp();
        startedAt = Date.now();
      }
      // writes land again with the broker back (their events from the outbox)
      await answersSince(load.result, startedAt, 'created', 20);
      const result = await load.stop();

      const during = result.answers.filter((a) => a.at > stoppedAt && a.at < startedAt);
      expect(during.length).toBeGreaterThan(0);
      expect(during.filter((a) => a.status < 200 || a.status >= 300)).toEqual([]);
      expect(result.abandoned).toBe(0);

      const rows = await query<{ id: string }>(cluster.databaseUrl, 'select id::text from notebook.samples where org_id = $1', [orgId]);
      const stored = new Set(rows.map((r) => r.id));
      expect([...stored].sort()).toEqual([...new Set(result.created)].sort());

      const seen = await events.collect(stored, 60_000);
      expect([...seen.dataIds].sort()).toEqual([...stored].sort());
      expect(seen.byEventId.size).toBe(stored.size);
      const pending = await eventually(
        'notebook outbox drained',
        async () => {
          const [r] = await query<{ n: number }>(cluster!.databaseUrl, 'select count(*)::int as n from notebook.outbox');
          return r.n === 0 ? r.n : undefined;
        },
        30_000,
      );
      expect(pending).toBe(0);
      const audit = await eventually(
        'one audit record per sample',
        async () => {
          const counts = await sampleAuditCounts(cluster!.databaseUrl, orgId);
          return counts.size === stored.size ? counts : undefined;
        },
        60_000,
      );
      for (const n of audit.values()) expect(n).toBe(1);
      console.info(`rabbitmq away: ${during.length} answers during the outage, ${stored.size} samples, ${seen.deliveries} deliveries`);
    } finally {
      await events.delete();
    }
  });
});
