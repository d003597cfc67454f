import { randomUUID } from 'node:crypto';
import { Client } from 'pg';
import { sql } from 'drizzle-orm';
import { metrics, newId, Receipts } from '@lab/kit';
import { purgeExpired } from '../src/retention';
import { startStack, type Stack } from '@lab/testing';
import { call, eventually } from '../../gateway/test/http';
import { waitFor } from '@lab/testing/waits';

/** Messages the notifications consumer has handled so far (the stack runs in this process). */
async function reactionsHandled(): Promise<number> {
  const { values } = await metrics().consumed.get();
  return values.filter((v) => v.labels.queue === 'notifications.reactions' && v.labels.outcome === 'ok').reduce((n, v) => n + v.value, 0);
}

let stack: Stack;
let orgId: string;
let writeKey: string;
let unboundReadKey: string;
const users: Record<string, { id: string; pat: string }> = {};

const api = (method: string, path: string, token: string, body?: unknown, headers?: Record<string, string>) =>
  call(stack.url, method, path, { token, body, headers });

async function member(role: string) {
  const u = await stack.admin.createUser();
  await stack.admin.putMember(orgId, u.id, role);
  const pat = await stack.admin.createPat(u.id, { scopes: ['read', 'write'], org_id: orgId });
  return { id: u.id, pat: pat.token };
}

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'audit', 'notifications'] });
  orgId = (await stack.admin.createOrg()).id;
  writeKey = (await stack.admin.createApiKey(orgId, { scopes: ['write'] })).token;
  unboundReadKey = (await stack.admin.createApiKey(orgId, { scopes: ['read'] })).token;
  users.alice = await member('researcher');
  users.bob = await member('researcher');
  users.qm1 = await member('qm');
  users.qm2 = await member('qm');
});

afterAll(async () => {
  await stack?.stop();
});

const mine = async (who: { pat: string }, query = '') => (await api('GET', `/v1/notifications${query}`, who.pat)).body;

describe('POST /v1/notifications', () => {
  it.each([
    ['empty title', { title: '', user_id: 'A' }, 'title'],
    ['title over 200', { title: 'x'.repeat(201), user_id: 'A' }, 'title'],
    ['body over 2000', { title: 't', body: 'x'.repeat(2001), user_id: 'A' }, 'body'],
    ['empty notification_type', { title: 't', notification_type: '', user_id: 'A' }, 'notification_type'],
    ['notification_type over 64', { title: 't', notification_type: 'x'.repeat(65), user_id: 'A' }, 'notification_type'],
    ['link_url over 2000', { title: 't', link_url: `https://e.test/${'x'.repeat(2000)}`, user_id: 'A' }, 'link_url'],
    ['entry_id not a uuid', { title: 't', entry_id: 'nope', user_id: 'A' }, 'entry_id'],
    ['user_id not a uuid', { title: 't', user_id: 'nope' }, 'user_id'],
    ['empty user_ids', { title: 't', user_ids: [] }, 'user_ids'],
    ['501 user_ids', { title: 't', user_ids: Array.from({ length: 501 }, () => randomUUID()) }, 'user_ids'],
    ['empty role', { title: 't', role: '' }, 'role'],
    ['role over 64', { title: 't', role: 'x'.repeat(65) }, 'role'],
    ['no target', { title: 't' }, 'user_id'],
    ['two targets', { title: 't', user_id: 'A', role: 'qm' }, 'user_id'],
    ['unknown field', { title: 't', user_id: 'A', colour: 'red' }, 'colour'],
  ])('refuses %s with 400 validation_failed and creates nothing', async (_name, body, field) => {
    const b = JSON.parse(JSON.stringify(body).replaceAll('"A"', JSON.stringify(users.alice!.id)));
    const before = (await mine(users.alice!)).pagination.total;
    const r = await api('POST', '/v1/notifications', writeKey, b);
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('validation_failed');
    expect(r.body.error.details.fields.map((f: { path: string }) => f.path)).toContain(field);
    expect((await mine(users.alice!)).pagination.total).toBe(before);
  });

  it.each(['ftp://example.test/x', 'javascript:alert(1)', 'example.test', '/relative'])('refuses link_url %s with 400 invalid_link_url', async (link_url) => {
    const r = await api('POST', '/v1/notifications', writeKey, { title: 't', link_url, user_id: users.alice!.id });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('invalid_link_url');
  });

  it('notifies a single user_id with every field, defaulting notification_type to external', async () => {
    const entry = randomUUID();
    const r = await api('POST', '/v1/notifications', writeKey, {
      title: 'Sample ready',
      body: 'Rack 4',
      link_url: 'https://lims.example.test/samples/1',
      entry_id: entry,
      user_id: users.bob!.id,
    });
    expect(r.status).toBe(201);
    expect(r.body).toEqual({ data: { created: 1, notification_ids: [expect.any(String)] } });
    const list = await mine(users.bob!);
    expect(list.data[0]).toEqual({
      id: r.body.data.notification_ids[0],
      notification_type: 'external',
      title: 'Sample ready',
      body: 'Rack 4',
      link_url: 'https://lims.example.test/samples/1',
      entry_id: entry,
      read_at: null,
      created_at: expect.any(String),
    });
    // nobody else got it
    expect((await mine(users.alice!)).data.map((n: { id: string }) => n.id)).not.toContain(r.body.data.notification_ids[0]);
  });

  it('notifies user_ids, dropping non-members and duplicates', async () => {
    const outsider = await stack.admin.createUser();
    const r = await api('POST', '/v1/notifications', writeKey, {
      title: 'Batch',
      notification_type: 'lims',
      user_ids: [users.alice!.id, randomUUID(), outsider.id, users.bob!.id, users.alice!.id],
    });
    expect(r.status).toBe(201);
    expect(r.body.data.created).toBe(2);
    expect(r.body.data.notification_ids).toHaveLength(2);
    for (const u of [users.alice!, users.bob!]) {
      const n = (await mine(u)).data.find((x: { title: string }) => x.title === 'Batch');
      expect(n).toMatchObject({ notification_type: 'lims' });
      expect(r.body.data.notification_ids).toContain(n.id);
    }
  });

  it('notifies every member holding a role', async () => {
    const r = await api('POST', '/v1/notifications', writeKey, { title: 'QM review', role: 'qm' });
    expect(r.status).toBe(201);
    expect(r.body.data.created).toBe(2);
    for (const u of [users.qm1!, users.qm2!]) expect((await mine(u)).data[0].title).toBe('QM review');
    expect((await mine(users.alice!)).data.map((n: { title: string }) => n.title)).not.toContain('QM review');
  });

  // more recipients than one statement could bind as VALUES rows (8 parameters each,
  // 65,535 at most): the role's members go in as arrays. The members are written
  // straight into identity's tables, which one database holds only on PostgreSQL.
  (process.env.DATABASE_URL ? it : it.skip)('notifies a role of 9,000 members', async () => {
    const bigOrg = (await stack.admin.createOrg()).id;
    const key = (await stack.admin.createApiKey(bigOrg, { scopes: ['write'] })).token;
    const { openDatabase } = await import('@lab/kit');
    const db = await openDatabase({ url: stack.databaseUrl, poolSize: 1 });
    try {
      await db.rows(
        sql`with u as (insert into identity.users (id, email)
                       select gen_random_uuid(), 'qm' || g || '-' || ${bigOrg} || '@example.test' from generate_series(1, 9000) g
                       returning id)
            insert into identity.memberships (org_id, user_id, role) select ${bigOrg}::uuid, id, 'qm' from u`,
      );
      const r = await api('POST', '/v1/notifications', key, { title: 'everyone in QM', role: 'qm' });
      expect(r.status).toBe(201);
      expect(r.body.data.created).toBe(9000);
      expect(new Set(r.body.data.notification_ids).size).toBe(9000);
      const stored = await db.rows<{ n: number; users: number }>(
        sql`select count(*)::int as n, count(distinct user_id)::int as users
            from notifications.notifications where org_id = ${bigOrg}::uuid and title = 'everyone in QM'`,
      );
      expect(stored).toEqual([{ n: 9000, users: 9000 }]);
    } finally {
      await db.close();
    }
  });

  it.each([
    ['only non-members', () => ({ user_ids: [randomUUID(), randomUUID()] })],
    ['a non-member user_id', () => ({ user_id: randomUUID() })],
    ['a role nobody holds', () => ({ role: 'dept_admin' })],
    ['a role that does not exist', () => ({ role: 'astronaut' })],
  ])('answers 400 no_valid_targets for %s', async (_n, target) => {
    const r = await api('POST', '/v1/notifications', writeKey, { title: 'nobody', ...target() });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('no_valid_targets');
  });

  it('needs the write scope', async () => {
    const r = await api('POST', '/v1/notifications', unboundReadKey, { title: 't', user_id: users.alice!.id });
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('insufficient_scope');
  });

  it('replays an Idempotency-Key instead of notifying twice', async () => {
    const key = randomUUID();
    const body = { title: `once ${key}`, user_id: users.alice!.id };
    const first = await api('POST', '/v1/notifications', writeKey, body, { 'Idempotency-Key': key });
    const again = await api('POST', '/v1/notifications', writeKey, body, { 'Idempotency-Key': key });
    expect(first.status).toBe(201);
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replay')).toBe('true');
    expect(again.body).toEqual(first.body);
    expect((await mine(users.alice!)).data.filter((n: { title: string }) => n.title === body.title)).toHaveLength(1);
  });

  // Both the service's batched store of the answer and the gateway's store of the
  // outcome are lost (processes killed right after the commit): the answer kept in
  // the write's own transaction is what the retry gets, not a second notification
  // nor 409.
  (process.env.DATABASE_URL ? it : it.skip)('answers a retry after the processes died with the answer kept in the write', async () => {
    const key = randomUUID();
    const body = { title: `kept ${key}`, user_id: users.alice!.id };
    const batched = jest.spyOn(Receipts.prototype as unknown as { storeAnswers(items: unknown[]): Promise<void> }, 'storeAnswers').mockResolvedValue(undefined);
    const db = new Client({ connectionString: stack.databaseUrl });
    await db.connect();
    try {
      const first = await api('POST', '/v1/notifications', writeKey, body, { 'Idempotency-Key': key });
      expect(first.status).toBe(201);
      const kept = await db.query('select answer is not null as answered from notifications.call_receipts where key = $1', [key]);
      expect(kept.rows).toEqual([{ answered: true }]);
      // the gateway keeps nothing about a write: the retry meets the receipt, as after any crash
      expect((await db.query('select 1 from gateway.idempotency where key = $1', [key])).rowCount).toBe(0);
      const retried = await api('POST', '/v1/notifications', writeKey, body, { 'Idempotency-Key': key });
      expect(retried.status).toBe(201);
      expect(retried.headers.get('idempotent-replay')).toBe('true');
      expect(retried.body).toEqual(first.body);
      expect((await mine(users.alice!)).data.filter((n: { title: string }) => n.title === body.title)).toHaveLength(1);
      expect(batched).not.toHaveBeenCalled();
    } finally {
      batched.mockRestore();
      await db.end();
    }
  });
});

describe('GET /v1/notifications', () => {
  it("lists the token user's notifications newest first, capped with a Warning", async () => {
    const carol = await member('viewer');
    const ids: string[] = [];
    for (const title of ['n1', 'n2', 'n3']) {
      ids.push((await api('POST', '/v1/notifications', writeKey, { title, user_id: carol.id })).body.data.notification_ids[0]);
    }
    const all = await api('GET', '/v1/notifications', carol.pat);
    expect(all.status).toBe(200);
    expect(all.body.data.map((n: { title: string }) => n.title)).toEqual(['n3', 'n2', 'n1']);
    expect(all.body).toMatchObject({ count: 3, pagination: { limit: 50, offset: 0, total: 3 } });
    expect(all.headers.get('warning')).toBeNull();

    const capped = await api('GET', '/v1/notifications?limit=2', carol.pat);
    expect(capped.body.data.map((n: { id: string }) => n.id)).toEqual([ids[2], ids[1]]);
    expect(capped.body).toMatchObject({ count: 2, pagination: { limit: 2, offset: 0, total: 3 } });
    expect(capped.headers.get('warning')).toBe('299 - "results capped at 2"');

    const rest = await api('GET', '/v1/notifications?limit=2&offset=2', carol.pat);
    expect(rest.body.data.map((n: { id: string }) => n.id)).toEqual([ids[0]]);
    expect(rest.headers.get('warning')).toBeNull();
  });

  it.each(['limit=0', 'limit=201', 'limit=abc', 'offset=-1', 'colour=red'])('refuses %s with 400', async (q) => {
    const r = await api('GET', `/v1/notifications?${q}`, users.alice!.pat);
    expect(r.status).toBe(400);
  });

  it('accepts limit 200', async () => {
    const r = await api('GET', '/v1/notifications?limit=200', users.alice!.pat);
    expect(r.status).toBe(200);
    expect(r.body.pagination.limit).toBe(200);
  });

  it('gives an API key without a user an empty list', async () => {
    const r = await api('GET', '/v1/notifications', unboundReadKey);
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ data: [], count: 0, pagination: { limit: 50, offset: 0, total: 0 } });
  });

  it("serves an API key bound to a user that user's notifications", async () => {
    const bound = await stack.admin.createApiKey(orgId, { scopes: ['read'], user_id: users.bob!.id });
    const r = await api('GET', '/v1/notifications', bound.token);
    expect(r.body.data).toEqual((await mine(users.bob!)).data);
    expect(r.body.count).toBeGreaterThan(0);
  });
});

describe('PATCH /v1/notifications/{id}', () => {
  it('lets the owner mark read and unread, and nobody else', async () => {
    const id = (await api('POST', '/v1/notifications', writeKey, { title: 'mark me', user_id: users.alice!.id })).body.data.notification_ids[0];
    const read = await api('PATCH', `/v1/notifications/${id}`, users.alice!.pat, { read: true });
    expect(read.status).toBe(200);
    // as PostgreSQL writes a timestamptz in JSON, the fields in the table's order, nulls kept
    const pgTime = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?\+00:00$/;
    expect(read.body.data).toMatchObject({ id, body: null, link_url: null, read_at: expect.stringMatching(pgTime), created_at: expect.stringMatching(pgTime) });
    expect(Object.keys(read.body.data)).toEqual(['id', 'notification_type', 'title', 'body', 'link_url', 'entry_id', 'read_at', 'created_at']);
    expect((await api('PATCH', `/v1/notifications/${id}`, users.bob!.pat, { read: false })).status).toBe(404);
    expect((await api('PATCH', `/v1/notifications/${id}`, writeKey, { read: false })).status).toBe(404);
    expect((await api('PATCH', `/v1/notifications/${id}`, users.alice!.pat, { read: 'yes' })).status).toBe(400);
    const unread = await api('PATCH', `/v1/notifications/${id}`, users.alice!.pat, { read: false });
    expect(unread.body.data.read_at).toBeNull();
  });
});

describe('notifications from events', () => {
  const publish = (type: string, data: unknown) => stack.bus.publish([{ id: newId(), type, org_id: orgId, occurred_at: new Date().toISOString(), data }]);

  it('tells the qm members of an environmental breach', async () => {
    await publish('environmental.breach', { parameter: 'temperature', external_code: 'FRIDGE-1', value: 9.4, unit: '°C', limit_min: 2, limit_max: 8 });
    for (const u of [users.qm1!, users.qm2!]) {
      const n = await eventually(async () => (await mine(u)).data.find((x: { title: string }) => x.title === 'Environmental limit breached: temperature'));
      expect(n).toMatchObject({ notification_type: 'environmental_breach', body: expect.stringContaining('FRIDGE-1') });
    }
  });

  it('tells them once per point in the quiet period, however many readings breach', async () => {
    const fridge = `FRIDGE-${randomUUID()}`;
    const freezer = `FREEZER-${randomUUID()}`;
    const breachOf = (code: string, value: number) => ({ parameter: 'temperature', external_code: code, value, unit: '°C', limit_min: 2, limit_max: 8 });
    const before = await reactionsHandled();
    // one ingest batch's worth of breaches of one point at once, and one of another point
    await stack.bus.publish([
      ...Array.from({ length: 30 }, (_, i) => ({
        id: newId(),
        type: 'environmental.breach',
        org_id: orgId,
        occurred_at: new Date().toISOString(),
        data: breachOf(fridge, 9 + i),
      })),
      { id: newId(), type: 'environmental.breach', org_id: orgId, occurred_at: new Date().toISOString(), data: breachOf(freezer, 12) },
    ]);
    const about = async (u: { pat: string }, code: string) =>
      (await mine(u, '?limit=200')).data.filter((x: { body: string }) => x.body?.startsWith(`${code}:`));
    for (const u of [users.qm1!, users.qm2!]) {
      await eventually(async () => ((await about(u, freezer)).length === 1 ? true : undefined));
      await eventually(async () => ((await about(u, fridge)).length >= 1 ? true : undefined));
    }
    // every one of the 31 breaches handled (the services run in this process): a second alert would be in by now
    await waitFor('the 31 breaches handled by notifications.reactions', async () => (await reactionsHandled()) >= before + 31);
    for (const u of [users.qm1!, users.qm2!]) expect(await about(u, fridge)).toHaveLength(1);

    // once the quiet period has passed, the point alerts again
    const db = new Client({ connectionString: stack.databaseUrl });
    await db.connect();
    try {
      await db.query(`update notifications.breach_alerts set notified_at = now() - interval '61 minutes' where point_key = $1`, [fridge]);
    } finally {
      await db.end();
    }
    await publish('environmental.breach', breachOf(fridge, 10));
    for (const u of [users.qm1!, users.qm2!]) await eventually(async () => ((await about(u, fridge)).length === 2 ? true : undefined));
  });

  it("tells a job's creator when it ends, not while it runs", async () => {
    const job = (status: string) => ({ id: randomUUID(), job_type: 'audit_export', status, error_message: status === 'dead' ? 'boom' : null });
    await publish('job.updated', { created_by: users.bob!.id, job: job('running') });
    await publish('job.updated', { created_by: users.bob!.id, job: job('dead') });
    const n = await eventually(async () => (await mine(users.bob!)).data.find((x: { title: string }) => x.title === 'Job audit_export failed'));
    expect(n).toMatchObject({ notification_type: 'job', body: 'boom' });
    expect((await mine(users.bob!)).data.filter((x: { notification_type: string }) => x.notification_type === 'job')).toHaveLength(1);
  });
});

describe('retention', () => {
  it('removes notifications past the retention, read or not, and keeps younger ones', async () => {
    const { openDatabase } = await import('@lab/kit');
    const db = await openDatabase({ url: stack.databaseUrl, poolSize: 1 });
    try {
      const ids = { oldUnread: newId(), oldRead: newId(), young: newId() };
      const add = (id: string, ageDays: number, read: boolean) =>
        db.rows(sql`insert into notifications.notifications (id, org_id, user_id, notification_type, title, read_at, created_at)
          values (${id}::uuid, ${orgId}::uuid, ${users.alice!.id}::uuid, 'external', 'aged',
                  ${read ? sql`now()` : sql`null`}, now() - (${ageDays} * interval '1 day'))`);
      await add(ids.oldUnread, 366, false);
      await add(ids.oldRead, 400, true);
      await add(ids.young, 364, false);
      // the service's own housekeeping may have run first: what is left is what counts
      await purgeExpired(db, 365);
      const left = await db.rows<{ id: string }>(
        sql`select id::text from notifications.notifications where id in (${ids.oldUnread}::uuid, ${ids.oldRead}::uuid, ${ids.young}::uuid)`,
      );
      expect(left).toEqual([{ id: ids.young }]);
    } finally {
      await db.close();
    }
  });
});
