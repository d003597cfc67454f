import pg from 'pg';
import { startCluster, type Cluster } from '../src/cluster';
import { startPgBouncer, type PgBouncer } from '../src/pgbouncer';
import { describeWithServers } from '../src/servers';
import { eventually, query, request, sampleAuditCounts, seedOrg } from './faults/support';

/** Server connections PgBouncer may open to the cluster's database, all processes together. */
const MAX_DB_CONNECTIONS = 4;
const POOL_SIZE = 10;
const WRITES = 240;

/**
 * The connection budget behind a transaction-mode pooler (docs/operations.md,
 * Pooler): seven processes whose pools add up to 70 connections share 4 server
 * connections to PostgreSQL through PgBouncer 1.18 (no protocol-level prepared
 * statements), and still serve concurrent keyed writes, their reads, the outbox
 * relays and the audit consumer without an error. Migrations run through the
 * pooler too (no DATABASE_DIRECT_URL): the three notebook replicas and the rest
 * each migrate at start under the transaction-scoped lock.
 */
describeWithServers(
  ['postgres', 'rabbitmq'],
  `${POOL_SIZE}-connection pools of 7 processes through PgBouncer with max_db_connections ${MAX_DB_CONNECTIONS}`,
  () => {
    jest.setTimeout(180_000);
    const upstream = process.env.DATABASE_DIRECT_URL ?? process.env.DATABASE_URL!;
    let bouncer: PgBouncer | undefined;
    let cluster: Cluster | undefined;

    afterAll(async () => {
      await cluster?.stop();
      await bouncer?.stop();
    });

    it('serves every concurrent keyed write and its read, and PostgreSQL never sees more than the budget', async () => {
      bouncer = await startPgBouncer({ upstreamUrl: upstream, poolSize: 20, maxDbConnections: MAX_DB_CONNECTIONS });
      const env = { DATABASE_POOL_SIZE: String(POOL_SIZE), DATABASE_PREPARED_STATEMENTS: 'false' };
      cluster = await startCluster({
        services: ['identity', 'notebook', 'audit'],
        replicas: { notebook: 3, gateway: 2 },
        databaseUrl: bouncer.url('test'),
        serviceEnv: { identity: env, notebook: env, audit: env, gateway: env },
      });
      const c = cluster;
      const database = new URL(c.databaseUrl).pathname.slice(1);
      const { orgId, token } = await seedOrg(c);

      // PostgreSQL's own count of the cluster database's connections, read beside the load
      const direct = new pg.Client({ connectionString: upstream });
      await direct.connect();
      let loadDone = false;
      let most = 0;
      const watched = (async () => {
        while (!loadDone) {
          const { rows } = await direct.query<{ n: number }>(
            `select count(*)::int as n from pg_stat_activity where datname = $1 and backend_type = 'client backend'`,
            [database],
          );
          most = Math.max(most, rows[0]!.n);
        }
      })();

      let answers: { status: number; id?: string; text: string }[];
      try {
        answers = await Promise.all(
          Array.from({ length: WRITES }, async (_, i) => {
            const r = await request(c.urls[i % c.urls.length]!, 'POST', '/v1/samples', {
              token,
              body: { name: `pooled ${i}`, type: 'budget' },
              headers: { 'Idempotency-Key': `budget-${i}` },
              timeoutMs: 60_000,
            });
            if (r.status !== 201) return { status: r.status, text: `${r.text} ${r.error ?? ''}` };
            const id = (r.body as { data: { id: string } }).data.id;
            // read back through the other gateway: the point read of a record by id (shared reads)
            const read = await request(c.urls[(i + 1) % c.urls.length]!, 'GET', `/v1/samples/${id}`, { token, timeoutMs: 60_000 });
            return { status: read.status, id, text: `${read.text} ${read.error ?? ''}` };
          }),
        );
      } finally {
        loadDone = true;
        await watched;
        await direct.end();
      }

      expect(answers.filter((a) => a.status !== 200)).toEqual([]);
      const ids = new Set(answers.map((a) => a.id));
      expect(ids.size).toBe(WRITES);
      expect(most).toBeGreaterThan(0);
      expect(most).toBeLessThanOrEqual(MAX_DB_CONNECTIONS);

      // the services' pools held more connections than PostgreSQL gave the whole cluster
      const clientSide = await Promise.all(
        ['identity', ...c.replicasOf('notebook'), 'audit', ...c.replicasOf('gateway')].map(async (name) => {
          const text = await (await fetch(`${c.opsUrl(name)}/metrics`)).text();
          return [...text.matchAll(/^lab_db_pool_connections\{pool="[^"]+",state="(?:idle|busy)"\} (\d+)$/gm)].reduce((n, m) => n + Number(m[1]), 0);
        }),
      );
      expect(clientSide.reduce((a, b) => a + b, 0)).toBeGreaterThan(MAX_DB_CONNECTIONS);

      // every write's audit record came through its outbox relay and the audit consumer, once
      const audited = await eventually(
        'an audit record of every write',
        async () => {
          const counts = await sampleAuditCounts(c.databaseUrl, orgId);
          return counts.size === WRITES ? counts : undefined;
        },
        60_000,
      );
      expect([...audited.values()].every((n) => n === 1)).toBe(true);
      const [stored] = await query<{ n: number }>(c.databaseUrl, 'select count(*)::int as n from notebook.samples where org_id = $1', [orgId]);
      expect(stored!.n).toBe(WRITES);
    });
  },
);
