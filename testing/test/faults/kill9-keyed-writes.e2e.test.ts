import { randomUUID } from 'node:crypto';
import { startCluster, type Cluster } from '../../src/cluster';
import { pace, waitFor } from '../../src/waits';
import { describeFault, query, request, type Answer } from './support';

/** Answers counted in `statuses` of a kind: 'ok' (2xx) or 'failed' (no answer, 5xx). */
const answered = (statuses: Record<number, number>, kind: 'ok' | 'failed') =>
  Object.entries(statuses)
    .filter(([s]) => (kind === 'ok' ? Number(s) >= 200 && Number(s) < 300 : Number(s) === 0 || Number(s) >= 500))
    .reduce((n, [, c]) => n + c, 0);

/** Waits for `n` more answers of a kind than now: the load going, or meeting the kill. */
async function more(statuses: Record<number, number>, kind: 'ok' | 'failed', n: number): Promise<void> {
  const base = answered(statuses, kind);
  await waitFor(`${n} more write(s) answered ${kind}`, () => answered(statuses, kind) >= base + n, { timeoutMs: 60_000, intervalMs: 50 });
}

/**
 * Exactly once through crashes, for every keyed write kind the spec lists:
 * records, stock movements, environmental readings, lab orders, jobs and
 * notifications. Writers send each write under a key of its own and retry it with
 * that key until it is answered 2xx, as the spec advises; meanwhile the gateway,
 * then each owning service, is killed with SIGKILL and started again. Afterwards
 * every key is sent once more: each answers 2xx marked as a replay with the first
 * answer's record, and each kind holds exactly one row per key (no write lost,
 * none made twice, whichever process died between a commit and its answer).
 */
describeFault('kill -9 and retry of every keyed write kind', [], () => {
  jest.setTimeout(420_000);
  let cluster: Cluster;
  let org: { id: string; token: string; userId: string; stockItemId: string; pointId: string };

  /** One keyed write kind: its request, the row count that must equal its keys, and the id of an answer. */
  interface Kind {
    name: string;
    owner: string;
    path: string;
    body: (n: string) => unknown;
    rows: () => Promise<number>;
    idOf: (a: Answer) => string;
    /**
     * A write in several transactions (a lab order: received, its samples made in
     * the notebook, then linked). An owner killed between them leaves the order
     * 'receiving' and its receipt without an answer: the retry is told so (409,
     * "answer was lost") instead of making a second order.
     */
    multiStep?: boolean;
  }
  let kinds: Kind[];

  beforeAll(async () => {
    cluster = await startCluster({
      services: ['identity', 'notebook', 'audit', 'inventory', 'telemetry', 'orders', 'jobs', 'notifications'],
      startTimeoutMs: 90_000,
    });
    const admin = async (method: string, path: string, body: unknown) => {
      const r = await request(cluster.url, method, path, { token: cluster.operatorToken, body });
      if (r.status >= 300 || r.status === 0) throw new Error(`${method} ${path} -> ${r.status} ${r.text}`);
      return r.body.data;
    };
    const o = await admin('POST', '/admin/v1/orgs', {
      name: 'keyed writes',
      modules: ['sample_intake', 'analytics_qc'],
      rate_limit: { per_minute: 1_000_000, per_hour: 1_000_000 },
    });
    const user = await admin('POST', '/admin/v1/users', { email: `keyed-${randomUUID()}@example.org` });
    await admin('PUT', `/admin/v1/orgs/${o.id}/members/${user.id}`, { role: 'admin' });
    const key = await admin('POST', `/admin/v1/orgs/${o.id}/api-keys`, { name: 'keyed', scopes: ['*'], user_id: user.id });
    const point = await admin('POST', `/admin/v1/orgs/${o.id}/environmental-points`, { parameter: 'temperature', unit: '°C', limit_max: 8 });
    const api = async (path: string, body: unknown) => {
      const r = await request(cluster.url, 'POST', path, { token: key.token, body });
      if (r.status !== 201) throw new Error(`POST ${path} -> ${r.status} ${r.text}`);
      return r.body.data;
    };
    const reagent = await api('/v1/reagents', { name: 'Ethanol' });
    const item = await api('/v1/stock-items', { catalog_id: reagent.id, quantity: 1_000_000, unit: 'mL' });
    org = { id: o.id, token: key.token, userId: user.id, stockItemId: item.id, pointId: point.id };

    const count = async (sql: string, params: unknown[]) => (await query<{ n: number }>(cluster.databaseUrl, sql, params))[0]!.n;
    const dataId = (a: Answer) => a.body.data.id as string;
    kinds = [
      {
        name: 'record',
        owner: 'notebook',
        path: '/v1/samples',
        body: (n) => ({ name: `keyed ${n}`, type: 'blood' }),
        rows: () => count(`select count(*)::int as n from notebook.samples where org_id = $1 and name like 'keyed %'`, [org.id]),
        idOf: dataId,
      },
      {
        name: 'stock movement',
        owner: 'inventory',
        path: '/v1/stock-movements',
        body: () => ({ stock_item_id: org.stockItemId, movement_type: 'consume', quantity_delta: -1 }),
        rows: () => count('select count(*)::int as n from inventory.stock_movements where stock_item_id = $1', [org.stockItemId]),
        idOf: dataId,
      },
      {
        name: 'readings',
        owner: 'telemetry',
        path: '/v1/environmental-readings',
        body: () => ({ point_id: org.pointId, value: Math.round(Math.random() * 1000) / 100 }),
        rows: () => count('select count(*)::int as n from telemetry.environmental_readings where point_id = $1', [org.pointId]),
        idOf: (a) => a.body.data.readings[0].id,
      },
      {
        name: 'lab order',
        owner: 'orders',
        path: '/v1/lab-orders',
        body: (n) => ({ external_order_number: `LIS-${n}`, requester_name: 'Dr. Ward', priority: 'routine', samples: [{ name: `tube ${n}`, type: 'serum' }] }),
        rows: () => count('select count(*)::int as n from orders.lab_orders where org_id = $1', [org.id]),
        idOf: dataId,
        multiStep: true,
      },
      {
        name: 'job',
        owner: 'jobs',
        path: '/v1/jobs',
        body: (n) => ({ job_type: 'box_layout_pdf', input: { rows: 1 + (n.charCodeAt(0) % 8), cols: 2 } }),
        rows: () => count('select count(*)::int as n from jobs.jobs where org_id = $1', [org.id]),
        idOf: dataId,
      },
      {
        name: 'notification',
        owner: 'notifications',
        path: '/v1/notifications',
        body: (n) => ({ title: `keyed ${n}`, notification_type: 'test', user_ids: [org.userId] }),
        rows: () => count(`select count(*)::int as n from notifications.notifications where org_id = $1 and title like 'keyed %'`, [org.id]),
        idOf: (a) => JSON.stringify(a.body.data),
      },
    ];
  });

  afterAll(async () => {
    await cluster?.stop();
  });

  interface Sent {
    kind: Kind;
    key: string;
    body: unknown;
    first?: Answer;
    /** applied, but its answer died with the owner between the write's steps */
    lost?: boolean;
  }

  /** Writers of the given kinds until stop(): each key retried until 2xx; what each key was first answered. */
  function writers(of: Kind[], perKind = 2) {
    let stopping = false;
    const sent: Sent[] = [];
    const statuses: Record<number, number> = {};
    // retries answered from a receipt during the load (the write had committed when its process died)
    const replays = { n: 0 };
    const writer = async (kind: Kind) => {
      while (!stopping) {
        const n = randomUUID();
        const w: Sent = { kind, key: `k9-${n}`, body: kind.body(n) };
        sent.push(w);
        for (const until = Date.now() + 120_000; Date.now() < until;) {
          const r = await request(cluster.url, 'POST', kind.path, { token: org.token, body: w.body, headers: { 'idempotency-key': w.key } });
          statuses[r.status] = (statuses[r.status] ?? 0) + 1;
          if (r.status >= 200 && r.status < 300) {
            w.first = r;
            if (r.headers?.get('idempotent-replay') === 'true') replays.n++;
            break;
          }
          if (r.status === 409 && /answer was lost/.test(r.text)) {
            if (!kind.multiStep) throw new Error(`${kind.name} lost its answer: ${r.text}`);
            w.first = r;
            w.lost = true;
            break;
          }
          if (r.status !== 0 && r.status < 500 && r.status !== 409 && r.status !== 429) throw new Error(`${kind.name} answered ${r.status}: ${r.text}`);
          await pace(200); // the writer's retry backoff
        }
      }
    };
    // one writer's failure stops them all (and fails the test through stop())
    const running = Promise.all(
      of.flatMap((k) =>
        Array.from({ length: perKind }, () =>
          writer(k).catch((err: unknown) => {
            stopping = true;
            throw err;
          }),
        ),
      ),
    );
    return {
      statuses,
      replays,
      sent,
      async stop() {
        stopping = true;
        await running;
        return sent;
      },
    };
  }

  /** Every key again: a replay of its first answer; and one row per key of each kind. */
  async function checkExactlyOnce(of: Kind[], sent: Sent[]) {
    expect(sent.filter((w) => !w.first).map((w) => `${w.kind.name} ${w.key}`)).toEqual([]);
    const mismatched: string[] = [];
    for (const w of sent) {
      if (w.lost) continue;
      const again = await request(cluster.url, 'POST', w.kind.path, { token: org.token, body: w.body, headers: { 'idempotency-key': w.key } });
      const replayed = again.status === w.first!.status && again.headers?.get('idempotent-replay') === 'true' && w.kind.idOf(again) === w.kind.idOf(w.first!);
      if (!replayed) mismatched.push(`${w.kind.name} ${w.key}: first ${w.first!.status} ${w.first!.text}, again ${again.status} ${again.text}`);
    }
    expect(mismatched).toEqual([]);
    for (const kind of of) {
      const keys = sent.filter((w) => w.kind === kind).length;
      expect([kind.name, await kind.rows()]).toEqual([kind.name, keys]);
    }
  }

  it('writes every kind exactly once when the gateway is killed mid-load', async () => {
    const before = await Promise.all(kinds.map((k) => k.rows()));
    expect(before.every((n) => n === 0)).toBe(true);
    const load = writers(kinds);
    await more(load.statuses, 'ok', 30);
    const failedBefore = answered(load.statuses, 'failed');
    await cluster.kill('gateway');
    await waitFor('a write meeting the killed gateway', () => answered(load.statuses, 'failed') > failedBefore, { timeoutMs: 30_000, intervalMs: 20 });
    await cluster.restart('gateway');
    await more(load.statuses, 'ok', 30);
    const sent = await load.stop();
    const lost = sent.filter((w) => w.lost).length;
    if (lost) console.info(`lab orders whose answer died with the owner: ${lost}`);
    console.info(`gateway killed: ${sent.length} keyed writes, statuses ${JSON.stringify(load.statuses)}, ${load.replays.n} retries answered from a receipt`);
    // the writers saw the gateway go, or the test proved nothing
    expect(load.statuses[0] ?? 0).toBeGreaterThan(0);
    await checkExactlyOnce(kinds, sent);
  });

  it('writes every kind exactly once when each owning service is killed mid-load in turn', async () => {
    const owners = [...new Set(kinds.map((k) => k.owner))];
    const totals: string[] = [];
    for (const owner of owners) {
      const mine = kinds.filter((k) => k.owner === owner);
      const rowsBefore = await Promise.all(mine.map((k) => k.rows()));
      const load = writers(mine, 4);
      await more(load.statuses, 'ok', 20);
      const failedBefore = answered(load.statuses, 'failed');
      await cluster.kill(owner);
      await waitFor(`a write meeting the killed ${owner}`, () => answered(load.statuses, 'failed') > failedBefore, { timeoutMs: 30_000, intervalMs: 20 });
      await cluster.restart(owner);
      await more(load.statuses, 'ok', 20);
      const sent = await load.stop();
      totals.push(`${owner}: ${sent.length} writes, statuses ${JSON.stringify(load.statuses)}, ${load.replays.n} from a receipt`);
      // rows of this round only: the earlier test's are there already
      const round = mine.map((k, i) => ({ ...k, rows: async () => (await k.rows()) - rowsBefore[i]! }));
      await checkExactlyOnce(
        round,
        sent.map((w) => ({ ...w, kind: round[mine.indexOf(w.kind)]! })),
      );
    }
    console.info(`owners killed: ${totals.join('; ')}`);
  });
});
