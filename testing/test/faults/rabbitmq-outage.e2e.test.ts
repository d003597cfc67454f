import { startCluster, type Cluster } from '../../src/cluster';
import { answersSince, describeFault, eventQueue, eventually, query, rabbit, request, sampleAuditCounts, seedOrg, writeLoad } from './support';

/** Writes answered 2xx while the broker is away, their events waiting in the outbox: how long the outage lasts. */
const WRITES_DURING_OUTAGE = 40;

/**
 * The broker app away under a write load, until the services have noticed (their
 * /readyz names the bus down) and 40 writes have been answered with their events
 * piled up in the outbox (the outage is measured in what it must hold back, not
 * in seconds): writes keep answering 2xx because they only touch the database
 * (the outbox), the outboxes drain once the broker is back, and no event or audit
 * record is lost.
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
        await eventually(
          'notebook /readyz reports the bus down',
          async () => {
            const r = await request(cluster!.opsUrl('notebook'), 'GET', '/readyz', { timeoutMs: 5_000 });
            return r.status === 503 && (r.body?.down as string[] | undefined)?.includes('bus') ? r : undefined;
          },
          30_000,
        );
        await answersSince(load.result, stoppedAt, 'created', WRITES_DURING_OUTAGE);
        await eventually(
          `the events of ${WRITES_DURING_OUTAGE} writes waiting in the notebook outbox`,
          async () => {
            const [r] = await query<{ n: number }>(cluster!.databaseUrl, 'select count(*)::int as n from notebook.outbox');
            return r!.n >= WRITES_DURING_OUTAGE ? r : undefined;
          },
          30_000,
        );
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
