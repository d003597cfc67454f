import { Agent, request as httpRequest, type IncomingMessage } from 'node:http';
import * as grpc from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import { startCluster, type Cluster } from '../../src/cluster';
import { waitFor } from '../../src/waits';
import { describeFault, request, seedOrg } from './support';

/**
 * What a process does between its SIGTERM and its stop (decision 053): it turns
 * unready (/readyz 503 naming `serving`, gRPC health NOT_SERVING) and goes on
 * serving, the gateway closing each keep-alive connection after its next answer,
 * until the drain is over or a second signal ends it. The drain is made longer
 * than the test so that only the second signal can end it.
 */
const LONG_DRAIN = { LAB_SHUTDOWN_DRAIN_MS: '600000' };
const HealthClient = grpc.makeGenericClientConstructor(healthService, 'grpc.health.v1.Health');

describeFault('the drain between SIGTERM and the stop', [], () => {
  jest.setTimeout(120_000);
  let cluster: Cluster;
  let org: { orgId: string; token: string };

  beforeAll(async () => {
    cluster = await startCluster({ services: ['identity'], rollouts: true, serviceEnv: { identity: LONG_DRAIN, gateway: LONG_DRAIN } });
    org = await seedOrg(cluster);
  });

  afterAll(async () => {
    await cluster?.stop();
  });

  it('a stopping gRPC service answers NOT_SERVING and unready, serves its calls, and stops on a second signal', async () => {
    const gone = cluster.kill('identity', 'SIGTERM');
    const ready = await waitFor('identity unready', () => readyz('identity').then((r) => (r.status === 503 ? r : undefined)));
    expect(ready.body).toMatchObject({ checks: { database: true, bus: true, serving: false }, down: ['serving'] });
    expect(await health(cluster.grpcAddress('identity'))).toBe('NOT_SERVING');
    // a call that needs identity (a new user) is still served
    const user = await request(cluster.url, 'POST', '/admin/v1/users', { token: cluster.operatorToken, body: { email: `drain-${Date.now()}@example.org` } });
    expect(user.status).toBe(201);

    await cluster.kill('identity', 'SIGINT');
    await gone;
    expect(cluster.output('identity')).toContain('drain cut short');
    expect(cluster.output('identity')).not.toContain('stop failed');
  });

  it('a stopping gateway answers unready, closes each keep-alive connection after its next answer, accepts new ones, and stops on a second signal', async () => {
    // the gateway resolves the token through identity, which the test before stopped
    await cluster.restart('identity');
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const before = await ping(agent);
      expect([before.res.statusCode, before.res.headers.connection]).toEqual([200, 'keep-alive']);

      const gone = cluster.kill('gateway', 'SIGTERM');
      const ready = await waitFor('gateway unready', () => readyz('gateway').then((r) => (r.status === 503 ? r : undefined)));
      expect(ready.body).toMatchObject({ checks: { serving: false }, down: ['serving'] });

      // the open connection is served once more and closed by its answer
      const during = await ping(agent);
      expect([during.res.statusCode, during.res.headers.connection, during.reused]).toEqual([200, 'close', true]);
      // a new connection (a balancer not caught up yet) is still accepted
      const fresh = await ping(agent);
      expect([fresh.res.statusCode, fresh.res.headers.connection, fresh.reused]).toEqual([200, 'close', false]);

      await cluster.kill('gateway', 'SIGINT');
      await gone;
      expect(cluster.output('gateway')).toContain('drain cut short');
      expect(cluster.output('gateway')).not.toContain('stop failed');
    } finally {
      agent.destroy();
    }
  });

  async function readyz(name: string): Promise<{ status: number; body: unknown }> {
    const r = await fetch(`${cluster.opsUrl(name)}/readyz`);
    return { status: r.status, body: await r.json() };
  }

  function ping(agent: Agent): Promise<{ res: IncomingMessage; reused: boolean }> {
    return new Promise((resolve, reject) => {
      const req = httpRequest(`${cluster.url}/v1/ping`, { agent, headers: { authorization: `Bearer ${org.token}` } }, (res) => {
        res.resume();
        res.on('end', () => resolve({ res, reused: req.reusedSocket }));
      });
      req.on('error', reject);
      req.end();
    });
  }

  function health(address: string): Promise<string | undefined> {
    const client = new HealthClient(address, grpc.credentials.createInsecure());
    return new Promise<string | undefined>((resolve, reject) => {
      (client.Check as (req: object, cb: (err: grpc.ServiceError | null, res?: { status?: string }) => void) => void).call(
        client,
        { service: '' },
        (err, res) => {
          client.close();
          if (err) reject(err);
          else resolve(res?.status);
        },
      );
    });
  }
});
