import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startCluster, type Cluster } from '../../src/cluster';
import { answersSince, describeFault, eventually, query, request, seedOrg, writeLoad } from './support';

/**
 * SIGKILL of the webhooks process and of the jobs worker in the middle of a
 * write load and of running jobs: every committed sample is delivered to its
 * subscriber at least once, every attempt of one delivery carries the same
 * X-Service-Delivery id, and no job is left running or queued for ever.
 */
describeFault('kill -9 of the webhooks and jobs processes', [], () => {
  jest.setTimeout(170_000);
  let cluster: Cluster | undefined;
  let receiver: Server | undefined;

  afterAll(async () => {
    await cluster?.stop();
    receiver?.closeAllConnections();
    await new Promise((r) => (receiver ? receiver.close(r) : r(undefined)));
  });

  it('delivers every webhook at least once under a stable id and leaves no job running', async () => {
    // sample id -> delivery ids seen for it
    const received = new Map<string, Set<string>>();
    let deliveries = 0;
    receiver = createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (d: string) => (body += d));
      req.on('end', () => {
        deliveries++;
        const sampleId = (JSON.parse(body) as { data: { id: string } }).data.id;
        const ids = received.get(sampleId) ?? new Set<string>();
        ids.add(String(req.headers['x-service-delivery']));
        received.set(sampleId, ids);
        res.end('ok');
      });
    });
    await new Promise<void>((r) => receiver!.listen(0, '127.0.0.1', () => r()));
    const port = (receiver.address() as AddressInfo).port;

    cluster = await startCluster({
      services: ['identity', 'notebook', 'audit', 'webhooks', 'jobs'],
      serviceEnv: {
        // a short send timeout keeps the delivery lease (timeout + 30 s) of a killed process short
        webhooks: { LAB_WEBHOOKS_ALLOW_PRIVATE_NETWORKS: 'true', LAB_WEBHOOKS_TIMEOUT_MS: '2000' },
        // slow steps so that jobs are running when the worker dies; a quick takeover after it
        jobs: { JOBS_STEP_DELAY_MS: '1000', JOBS_HEARTBEAT_MS: '300', JOBS_VISIBILITY_MS: '2000', JOBS_CONCURRENCY: '4', JOBS_POLL_MS: '200' },
      },
    });
    const { orgId, token } = await seedOrg(cluster);
    const sub = await request(cluster.url, 'POST', `/admin/v1/orgs/${orgId}/webhook-subscriptions`, {
      token: cluster.operatorToken,
      body: { url: `http://127.0.0.1:${port}/hook`, events: ['sample.created'] },
    });
    expect(sub.status).toBe(201);

    const load = writeLoad(cluster.url, token, 4);
    const jobIds: string[] = [];
    try {
      let at = Date.now();
      await answersSince(load.result, at, 'created', 20);
      // webhooks down while writes go on: their deliveries wait for it
      at = Date.now();
      await cluster.kill('webhooks');
      await answersSince(load.result, at, 'created', 5);
      await cluster.restart('webhooks');

      for (let i = 0; i < 8; i++) {
        const r = await request(cluster.url, 'POST', '/v1/jobs', { token, body: { job_type: 'box_layout_pdf', input: { rows: 2, cols: 2 } } });
        expect(r.status).toBe(202);
        jobIds.push(r.body.data.id);
      }
      // the worker dies with jobs in hand (running), not between them
      await eventually(
        'a job running',
        async () => {
          const [r] = await query<{ n: number }>(cluster!.databaseUrl, `select count(*)::int as n from jobs.jobs where status = 'running'`);
          return r!.n > 0 ? r!.n : undefined;
        },
        20_000,
      );
      await cluster.kill('jobs');
      at = Date.now();
      await answersSince(load.result, at, 'created', 5);
      await cluster.restart('jobs');
      at = Date.now();
      await answersSince(load.result, at, 'created', 20);
    } finally {
      const result = await load.stop();
      expect(result.abandoned).toBe(0);
    }

    const rows = await query<{ id: string }>(cluster.databaseUrl, 'select id::text from notebook.samples where org_id = $1', [orgId]);
    const stored = rows.map((r) => r.id);
    expect(stored.length).toBeGreaterThan(0);
    await eventually('every sample delivered', async () => (stored.every((id) => received.has(id)) ? true : undefined), 90_000);
    for (const id of stored) expect(received.get(id)!.size).toBe(1);

    const jobs = await eventually(
      'every job ended',
      async () => {
        const list = await query<{ id: string; status: string; attempts: number }>(
          cluster!.databaseUrl,
          'select id::text, status, attempts from jobs.jobs where id = any($1::uuid[])',
          [jobIds],
        );
        return list.every((j) => j.status === 'succeeded' || j.status === 'failed' || j.status === 'dead') ? list : undefined;
      },
      60_000,
    );
    expect(jobs.map((j) => j.status)).toEqual(Array(jobIds.length).fill('succeeded'));
    // the kill was felt: some job ran twice (taken back from the dead worker)
    expect(jobs.some((j) => j.attempts > 1)).toBe(true);
    console.info(`kill -9 webhooks/jobs: ${stored.length} samples, ${deliveries} deliveries received, attempts ${jobs.map((j) => j.attempts).join(',')}`);
  });
});
