import { sql, type SQL } from 'drizzle-orm';
import {
  AmqpBus,
  createLogger,
  LIST_PAGE_BYTES,
  newId,
  openDatabase,
  RpcClient,
  systemContext,
  type Bus,
  type BusMessage,
  type Database,
  type RunningService,
  runService,
  MemoryBus,
} from '@lab/kit';
import { audit, auditRecordsJson, chainReportObject, jsonString } from '@lab/contracts';
import { definition } from '../src/index';
import { listRecords, parseListRequest } from '../src/audit-log';
import { dropFreshDatabases, freshDatabaseUrl, uniqueExchange } from '../../../testing/src/backing';
import { waitFor } from '../../../testing/src/waits';

const secret = 'test-secret-0123456789';
const log = createLogger('test', 'silent');
let bus: Bus;
let svc: RunningService;
let client: RpcClient<typeof audit.AuditServiceService>;
let databaseUrl: string | undefined;
const orgA = newId();
const orgB = newId();

function record(org: string, i: number): BusMessage {
  return {
    id: newId(),
    type: 'audit.record',
    org_id: org,
    occurred_at: new Date().toISOString(),
    request_id: `req-${i}`,
    data: {
      action: 'create',
      resource: 'samples',
      record_id: newId(),
      before: null,
      after: { name: `s${i}` },
      actor_user_id: null,
      actor_token_id: newId(),
      token_kind: 'api_key',
      service: 'notebook',
      changed_fields: ['name'],
      request_id: `req-${i}`,
    },
  };
}

const ctx = (org: string) => ({ ...systemContext('t'), org_id: org, token_kind: 'api_key', scopes: ['audit:read'] });

const waitForCount = (org: string, n: number) =>
  waitFor(`${n} audit records for ${org}`, async () => {
    const res = await client.call('listAudit', { limit: 1000 }, ctx(org));
    return res.count >= n ? res.count : undefined;
  });

beforeAll(async () => {
  bus = process.env.AMQP_URL ? await AmqpBus.connect(process.env.AMQP_URL, uniqueExchange(), log, { queueExpiresMs: 600_000 }) : new MemoryBus(log);
  databaseUrl = await freshDatabaseUrl();
  svc = await runService(definition, { log, bus, secret, databaseUrl, dataDir: '/tmp/lab-audit-test', grpcAddress: '127.0.0.1:0' });
  client = new RpcClient(audit.AuditServiceClient, svc.address, { secret });
});

afterAll(async () => {
  client.close();
  await svc.stop();
  await bus.close();
  await dropFreshDatabases();
});

test('stores each record once, even when a message is delivered twice', async () => {
  const msgs = Array.from({ length: 5 }, (_, i) => record(orgB, i));
  await bus.publish(msgs);
  await bus.publish([msgs[0]!, msgs[1]!]);
  await waitForCount(orgB, 5);
  // give the duplicates time to arrive, then count again
  await bus.publish([record(orgB, 99)]);
  expect(await waitForCount(orgB, 6)).toBe(6);
});

test('keyset pages cover the log with no gap and no duplicate, scoped to the org', async () => {
  const msgs = Array.from({ length: 250 }, (_, i) => record(orgA, i));
  await bus.publish(msgs);
  await waitForCount(orgA, 250);
  const seen: string[] = [];
  let cursor: { since_created_at?: string; since_id?: string } = {};
  let pages = 0;
  for (;;) {
    const res = await client.call('listAudit', { limit: 100, ...cursor }, ctx(orgA));
    const data = JSON.parse(jsonString(auditRecordsJson(res.records))) as { id: string; resource: string; after: { name: string } }[];
    expect(data.length).toBe(res.count);
    seen.push(...data.map((r) => r.id));
    pages++;
    if (!res.next_since_id) break;
    cursor = { since_created_at: res.next_since_created_at, since_id: res.next_since_id };
  }
  expect(pages).toBe(3);
  expect(new Set(seen).size).toBe(250);
  expect(new Set(seen)).toEqual(new Set(msgs.map((m) => m.id)));
});

test('pages of heavy records are cut by bytes and still cover the log', async () => {
  // records of almost 1 MB (a whole entry before and after): 1,000 of them would be
  // a gigabyte in one answer, over what a gRPC message may carry
  const org = newId();
  const heavy = Array.from({ length: 12 }, (_, i) => {
    const m = record(org, i);
    (m.data as { after: unknown }).after = { name: `s${i}`, content: 'x'.repeat(900_000) };
    return m;
  });
  for (const m of heavy) await bus.publish([m]);
  const db = await openDatabase({ url: databaseUrl, dataDir: '/tmp/lab-audit-test', poolSize: 1 });
  try {
    await waitFor(
      `${heavy.length} heavy audit records stored`,
      async () => (await db.rows<{ n: number }>(sql`select count(*)::int as n from audit.records where org_id = ${org}::uuid`))[0]!.n === heavy.length,
      20_000,
    );
  } finally {
    await db.close();
  }
  const seen: string[] = [];
  const sizes: number[] = [];
  let cursor: { since_created_at?: string; since_id?: string } = {};
  for (;;) {
    const res = await client.call('listAudit', { limit: 1000, ...cursor }, ctx(org));
    sizes.push(Buffer.byteLength(jsonString(auditRecordsJson(res.records))));
    seen.push(...res.records.map((r) => r.id));
    if (!res.next_since_id) break;
    cursor = { since_created_at: res.next_since_created_at, since_id: res.next_since_id };
  }
  expect(sizes.length).toBeGreaterThan(1);
  expect(new Set(seen)).toEqual(new Set(heavy.map((m) => m.id)));
  expect(seen).toHaveLength(heavy.length);
  // no page starts past the budget, so none holds more than the budget and one record
  for (const bytes of sizes) expect(bytes).toBeLessThan(LIST_PAGE_BYTES + 1_000_000);
});

test('rejects a half cursor and an out-of-range limit', async () => {
  await expect(client.call('listAudit', { limit: 1001 }, ctx(orgA))).rejects.toMatchObject({ kind: 'invalid', code: 'validation_failed' });
  await expect(client.call('listAudit', { limit: 10, since_id: newId() }, ctx(orgA))).rejects.toMatchObject({ kind: 'invalid' });
  await expect(client.call('listAudit', { limit: 10, from: 'yesterday' }, ctx(orgA))).rejects.toMatchObject({ kind: 'invalid' });
});

test('refuses a forged caller context', async () => {
  const forged = new RpcClient(audit.AuditServiceClient, svc.address, { secret: 'another-secret-0123456' });
  await expect(forged.call('listAudit', { limit: 10 }, ctx(orgA))).rejects.toMatchObject({ kind: 'unauthenticated' });
  forged.close();
});

test('a page is read in keyset order from the index, never sorted', async () => {
  // A plan, not a timing: a Sort here means every row of the org is read for each
  // page (an output alias once shadowed created_at in the ORDER BY).
  const db: Database = await openDatabase({ url: databaseUrl, dataDir: '/tmp/lab-audit-test', poolSize: 1 });
  try {
    for (const cursor of [{}, { since_created_at: new Date().toISOString(), since_id: newId() }]) {
      let plan = '';
      const explaining = {
        ...db,
        rows: (q: SQL) =>
          db.tx(async (tx) => {
            // on a small table a seq scan or a bitmap scan plus a sort is cheapest;
            // with both priced out the only way left to skip the index order must
            // show up as a Sort
            await tx.execute(sql`set local enable_seqscan = off`);
            await tx.execute(sql`set local enable_bitmapscan = off`);
            const lines = await db.rows<Record<string, string>>(sql`explain ${q}`, tx);
            plan = lines.map((l) => Object.values(l)[0]).join('\n');
            return [];
          }),
      };
      await listRecords(explaining, orgA, parseListRequest({ limit: 100, ...cursor }));
      expect(plan).toMatch(/Index Scan using records_org_keyset_idx/);
      expect(plan).not.toMatch(/Sort/);
    }
  } finally {
    await db.close();
  }
});

describe('hash chain', () => {
  const verify = (org: string) => client.call('verifyChain', { org_id: org }, { ...systemContext('t'), token_kind: 'operator' }).then(chainReportObject);

  /** An organisation with `n` stored records, and a session on the database to tamper with them. */
  async function chainOf(n: number): Promise<{ org: string; db: Database; ids: string[] }> {
    const org = newId();
    // several publishes, duplicates among them: a redelivery must not take a sequence number
    const msgs = Array.from({ length: n }, (_, i) => record(org, i));
    await bus.publish(msgs.slice(0, 3));
    await bus.publish([msgs[0]!, ...msgs.slice(3)]);
    await waitForCount(org, n);
    const db = await openDatabase({ url: databaseUrl, dataDir: '/tmp/lab-audit-test', poolSize: 1 });
    const rows = await db.rows<{ id: string }>(sql`select id from audit.records where org_id = ${org}::uuid order by seq`);
    return { org, db, ids: rows.map((r) => r.id) };
  }

  test('an untouched chain verifies, and each entry links to the one before', async () => {
    const { org, db } = await chainOf(6);
    try {
      const report = await verify(org);
      const [head] = await db.rows<{ seq: string; hash: string }>(sql`select seq::text, hash from audit.chain_heads where chain_org = ${org}::uuid`);
      expect(report).toEqual({ ok: true, entries: 6, head_hash: head!.hash });
      expect(head!.seq).toBe('6');
      const page = JSON.parse(jsonString(auditRecordsJson((await client.call('listAudit', { limit: 10 }, ctx(org))).records))) as {
        seq: number;
        prev_hash: string;
        hash: string;
      }[];
      expect(page.map((r) => r.seq)).toEqual([1, 2, 3, 4, 5, 6]);
      for (let i = 1; i < page.length; i++) expect(page[i]!.prev_hash).toBe(page[i - 1]!.hash);
      expect(page[0]!.prev_hash).toBe('0'.repeat(64));
    } finally {
      await db.close();
    }
  });

  test('batches that mix organisations keep each chain whole', async () => {
    const orgs = [newId(), newId(), newId()];
    // interleaved, in several publishes: batches hold entries of every organisation
    const msgs = Array.from({ length: 300 }, (_, i) => record(orgs[i % 3]!, i));
    for (let i = 0; i < msgs.length; i += 70) await bus.publish(msgs.slice(i, i + 70));
    for (const org of orgs) await waitForCount(org, 100);
    for (const org of orgs) expect(await verify(org)).toMatchObject({ ok: true, entries: 100 });
  });

  test('entries without an organisation form a chain of their own, verified under the nil UUID', async () => {
    const msgs = Array.from({ length: 3 }, (_, i) => ({ ...record(orgA, i), org_id: null }));
    await bus.publish(msgs);
    const nil = '00000000-0000-0000-0000-000000000000';
    const report = await waitFor('3 entries in the chain without an organisation', async () => {
      const r = await verify(nil);
      return r.entries >= 3 ? r : undefined;
    });
    expect(report).toMatchObject({ ok: true, entries: 3 });
  });

  test('an organisation without entries verifies empty', async () => {
    expect(await verify(newId())).toEqual({ ok: true, entries: 0, head_hash: null });
  });

  test('names an entry whose content was edited in the database', async () => {
    const { org, db, ids } = await chainOf(5);
    try {
      await db.rows(sql`update audit.records set after = '{"name": "forged"}' where id = ${ids[2]}::uuid`);
      expect(await verify(org)).toEqual({ ok: false, entries: 2, broken: { seq: 3, id: ids[2], problem: 'hash_mismatch' } });
    } finally {
      await db.close();
    }
  });

  test('names the entry after a deleted one, and a chain whose last entry was deleted', async () => {
    const { org, db, ids } = await chainOf(5);
    try {
      await db.rows(sql`delete from audit.records where id = ${ids[1]}::uuid`);
      expect(await verify(org)).toEqual({ ok: false, entries: 1, broken: { seq: 3, id: ids[2], problem: 'sequence_gap', expected_seq: 2 } });
      const tail = await chainOf(4);
      try {
        await tail.db.rows(sql`delete from audit.records where id = ${tail.ids[3]}::uuid`);
        expect(await verify(tail.org)).toEqual({ ok: false, entries: 3, broken: { seq: 4, id: null, problem: 'head_mismatch', expected_seq: 4 } });
      } finally {
        await tail.db.close();
      }
    } finally {
      await db.close();
    }
  });

  test('names an entry moved to another place in the order', async () => {
    const { org, db, ids } = await chainOf(5);
    try {
      // entries 2 and 3 swap places (through a free number: seq is unique per organisation)
      await db.rows(sql`update audit.records set seq = -1 where id = ${ids[1]}::uuid`);
      await db.rows(sql`update audit.records set seq = 2 where id = ${ids[2]}::uuid`);
      await db.rows(sql`update audit.records set seq = 3 where id = ${ids[1]}::uuid`);
      expect(await verify(org)).toEqual({ ok: false, entries: 1, broken: { seq: 2, id: ids[2], problem: 'prev_hash_mismatch' } });
    } finally {
      await db.close();
    }
  });

  test('needs the operator', async () => {
    await expect(client.call('verifyChain', { org_id: orgA }, ctx(orgA))).rejects.toMatchObject({ kind: 'forbidden' });
  });
});
