import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { startCluster, type Cluster } from '../src/cluster';
import { startPgBouncer, type PgBouncer } from '../src/pgbouncer';
import { describeWithServers } from '../src/servers';
import { eventually, query, request, sampleAuditCounts } from './faults/support';

/** Server connections PgBouncer may open to the cluster's database, all processes together. */
const MAX_DB_CONNECTIONS = 4;
const POOL_SIZE = 10;
const SAMPLES = 240;
const EQUIPMENT = 40;

/**
 * The connection budget behind a transaction-mode pooler (docs/operations.md,
 * Pooler): eight processes whose pools add up to 80 connections share 4 server
 * connections to PostgreSQL through PgBouncer 1.18 (no protocol-level prepared
 * statements), and still serve concurrent keyed writes (samples, with group
 * commit, and equipment), their reads, the outbox relays and the audit consumer
 * without an error. Migrations run through the pooler too (no
 * DATABASE_DIRECT_URL): the three notebook replicas and the rest each migrate at
 * start under the transaction-scoped lock.
 */
describeWithServers(['postgres', 'rabbitmq'], `pools of ${POOL_SIZE} in 8 processes through PgBouncer, max_db_connections ${MAX_DB_CONNECTIONS}`, () => {
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
      services: ['identity', 'notebook', 'audit', 'equipment'],
      replicas: { notebook: 3, gateway: 2 },
      databaseUrl: bouncer.url('test'),
      serviceEnv: { identity: env, notebook: env, audit: env, equipment: env, gateway: env },
    });
    const c = cluster;
    const database = new URL(c.databaseUrl).pathname.slice(1);
    const admin = async (method: string, path: string, body: unknown) => {
      const r = await request(c.url, method, path, { token: c.operatorToken, body });
      if (r.status >= 300 || r.status === 0) throw new Error(`${method} ${path} -> ${r.status} ${r.text} ${r.error ?? ''}`);
      return (r.body as { data: { id: string; token: string } }).data;
    };
    const orgId = (
      await admin('POST', '/admin/v1/orgs', { name: 'pooled', modules: ['lab_equipment'], rate_limit: { per_minute: 1_000_000, per_hour: 1_000_000 } })
    ).id;
    const user = (await admin('POST', '/admin/v1/users', { email: `pooled-${randomUUID()}@example.org` })).id;
    await admin('PUT', `/admin/v1/orgs/${orgId}/members/${user}`, { role: 'admin' });
    const { token } = await admin('POST', `/admin/v1/orgs/${orgId}/api-keys`, { name: 'pooled', scopes: ['*'], user_id: user });

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

    /** A keyed create through one gateway, then its read by id through the other (a point read: shared reads). */
    const writeAndRead = async (i: number, resource: string, body: unknown) => {
      const r = await request(c.urls[i % c.urls.length]!, 'POST', `/v1/${resource}`, {
        token,
        body,
        headers: { 'Idempotency-Key': `budget-${resource}-${i}` },
        timeoutMs: 60_000,
      });
      if (r.status !== 201) return { status: r.status, text: `${resource}: ${r.text} ${r.error ?? ''}` };
      const id = (r.body as { data: { id: string } }).data.id;
      const read = await request(c.urls[(i + 1) % c.urls.length]!, 'GET', `/v1/${resource}/${id}`, { token, timeoutMs: 60_000 });
      return { status: read.status, id, text: `${resource}: ${read.text} ${read.error ?? ''}` };
    };
    let answers: { status: number; id?: string; text: string }[];
    try {
      answers = await Promise.all([
        ...Array.from({ length: SAMPLES }, (_, i) => writeAndRead(i, 'samples', { name: `pooled ${i}`, type: 'budget' })),
        ...Array.from({ length: EQUIPMENT }, (_, i) => writeAndRead(i, 'equipment', { name: `pooled balance ${i}` })),
      ]);
    } finally {
      loadDone = true;
      await watched;
      await direct.end();
    }

    expect(answers.filter((a) => a.status !== 200)).toEqual([]);
    expect(new Set(answers.map((a) => a.id)).size).toBe(SAMPLES + EQUIPMENT);
    expect(most).toBeGreaterThan(0);
    expect(most).toBeLessThanOrEqual(MAX_DB_CONNECTIONS);

    // the services' pools held more connections than PostgreSQL gave the whole cluster
    const clientSide = await Promise.all(
      ['identity', ...c.replicasOf('notebook'), 'audit', 'equipment', ...c.replicasOf('gateway')].map(async (name) => {
        const text = await (await fetch(`${c.opsUrl(name)}/metrics`)).text();
        return [...text.matchAll(/^lab_db_pool_connections\{pool="[^"]+",state="(?:idle|busy)"\} (\d+)$/gm)].reduce((n, m) => n + Number(m[1]), 0);
      }),
    );
    expect(clientSide.reduce((a, b) => a + b, 0)).toBeGreaterThan(MAX_DB_CONNECTIONS);

    // every sample's audit record came through its outbox relay and the audit consumer, once
    const audited = await eventually(
      'an audit record of every sample',
      async () => {
        const counts = await sampleAuditCounts(c.databaseUrl, orgId);
        return counts.size === SAMPLES ? counts : undefined;
      },
      60_000,
    );
    expect([...audited.values()].every((n) => n === 1)).toBe(true);
    const count = async (table: string) =>
      (await query<{ n: number }>(c.databaseUrl, `select count(*)::int as n from ${table} where org_id = $1`, [orgId]))[0]!.n;
    expect(await count('notebook.samples')).toBe(SAMPLES);
    expect(await count('equipment.equipment')).toBe(EQUIPMENT);
  });
});
