import { randomUUID } from 'node:crypto';
import { Client } from 'pg';
import type { BusMessage } from '@lab/kit';
import { startStack, type Stack } from '@lab/testing';
import { call, eventually } from './http';

let stack: Stack;
let key: string;
let adminKey: string;
const created: BusMessage<{ id: string; name: string }>[] = [];

const post = (body: unknown, idempotencyKey?: string, token = key) =>
  call(stack.url, 'POST', '/v1/samples', { token, body, headers: idempotencyKey ? { 'idempotency-key': idempotencyKey } : {} });

const total = async () => (await call(stack.url, 'GET', '/v1/samples?limit=1', { token: key })).body.pagination.total as number;

/** Creates a sample without a key and waits for its event: every earlier event has arrived by then. */
async function drainEvents(): Promise<void> {
  const marker = await post({ name: `marker-${randomUUID()}` });
  await eventually(async () => (created.some((m) => m.data.id === marker.body.data.id) ? true : undefined));
}

const eventsFor = (id: string) => created.filter((m) => m.data.id === id).length;

beforeAll(async () => {
  // jobs too: its writes are outside the records engine
  stack = await startStack({ services: ['identity', 'notebook', 'audit', 'jobs'] });
  // A queue bound to this stack's exchange (RabbitMQ when AMQP_URL is set).
  await stack.bus.subscribe({
    queue: 'test.sample-created',
    transient: true,
    bindings: ['sample.created'],
    handler: async (m) => {
      created.push(m as BusMessage<{ id: string; name: string }>);
    },
  });
  const org = await stack.admin.createOrg();
  key = (await stack.admin.createApiKey(org.id, { scopes: ['read', 'write'] })).token;
  adminKey = (await stack.admin.createApiKey(org.id, { scopes: ['read', 'write', 'admin'] })).token;
});

afterAll(async () => {
  await stack?.stop();
});

describe('Idempotency-Key', () => {
  it('replays the first answer and writes once', async () => {
    const before = await total();
    const k = `key-${randomUUID()}`;
    const first = await post({ name: 'idem', type: 'blood' }, k);
    expect(first.status).toBe(201);
    expect(first.headers.get('idempotent-replay')).toBeNull();
    const again = await post({ type: 'blood', name: 'idem' }, k); // same payload, other key order
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replay')).toBe('true');
    expect(again.text).toBe(first.text);
    expect(await total()).toBe(before + 1);
    await drainEvents();
    expect(eventsFor(first.body.data.id)).toBe(1);
  });

  it('answers 409 in the special shape for the same key with another payload', async () => {
    const k = `key-${randomUUID()}`;
    expect((await post({ name: 'one' }, k)).status).toBe(201);
    const r = await post({ name: 'two' }, k);
    expect(r.status).toBe(409);
    expect(r.body).toEqual({ data: null, error: 'idempotency_key_conflict', meta: { message: expect.any(String) } });
  });

  it('keeps keys apart per token', async () => {
    const other = (await stack.admin.createApiKey((await stack.admin.createOrg()).id, { scopes: ['write'] })).token;
    const k = `key-${randomUUID()}`;
    const a = await post({ name: 'a' }, k);
    const b = await post({ name: 'a' }, k, other);
    expect(b.status).toBe(201);
    expect(b.headers.get('idempotent-replay')).toBeNull();
    expect(b.body.data.id).not.toBe(a.body.data.id);
  });

  it('replays an answer with quotes, backslashes and non-ASCII text byte for byte', async () => {
    const k = `key-${randomUUID()}`;
    const body = { name: 'tricky \\ "quoted" {braces,commas} NULL µ 😀', type: 'blood' };
    const first = await post(body, k);
    expect(first.status).toBe(201);
    const again = await eventually(async () => {
      const r = await post(body, k);
      return r.headers.get('idempotent-replay') === 'true' ? r : undefined;
    });
    expect(again.text).toBe(first.text);
    expect(again.body.data.name).toBe(body.name);
  });

  it('replays a 4xx outcome too', async () => {
    const k = `key-${randomUUID()}`;
    const first = await post({ type: 'no name' }, k);
    expect(first.status).toBe(400);
    const again = await post({ type: 'no name' }, k);
    expect(again.status).toBe(400);
    expect(again.headers.get('idempotent-replay')).toBe('true');
    expect(again.text).toBe(first.text);
  });

  it.each([['short'], ['x'.repeat(201)]])('refuses the key %#: 400 validation_failed', async (bad) => {
    const r = await post({ name: 'x' }, bad);
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('validation_failed');
  });

  it('lets 20 concurrent duplicates write once and answer identically', async () => {
    const before = await total();
    const k = `key-${randomUUID()}`;
    const answers = await Promise.all(Array.from({ length: 20 }, () => post({ name: 'burst' }, k)));
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(201));
    expect(new Set(answers.map((a) => a.text)).size).toBe(1);
    expect(answers.filter((a) => a.headers.get('idempotent-replay') === null)).toHaveLength(1);
    expect(await total()).toBe(before + 1);
    await drainEvents();
    expect(eventsFor(answers[0]!.body.data.id)).toBe(1);
  });

  // Concurrent claims share one statement: a key given twice in one batch must
  // still let exactly one request run, and the other must be judged against it.
  it('lets one of two concurrent requests with one key and different payloads write; the other is a conflict', async () => {
    const before = await total();
    const k = `key-${randomUUID()}`;
    const others = Array.from({ length: 5 }, (_, i) => post({ name: `bystander-${i}` }, `key-${randomUUID()}`));
    const [a, b] = await Promise.all([post({ name: 'first' }, k), post({ name: 'second' }, k)]);
    expect((await Promise.all(others)).map((r) => r.status)).toEqual(Array(5).fill(201));
    expect([a.status, b.status].sort()).toEqual([201, 409]);
    const winner = a.status === 201 ? a : b;
    const replay = await post({ name: winner.body.data.name }, k);
    expect(replay.headers.get('idempotent-replay')).toBe('true');
    expect(replay.text).toBe(winner.text);
    expect(await total()).toBe(before + 6);
  });
});

/** The gateway's rows for a key: refusals only, never a write's outcome. */
async function gatewayRows(key: string): Promise<number> {
  return (await onDatabase<{ n: number }>(`select count(*)::int as n from gateway.idempotency where key = $1`, [key])).rows[0]!.n;
}

// The gateway keeps nothing for a write: a retry after a gateway died (or on
// another replica) finds exactly what any retry finds, the owning service's
// receipt, and gets the first answer marked as a replay.
(process.env.DATABASE_URL ? it : it.skip)("replays a write from the owning service's receipt, with nothing kept at the gateway", async () => {
  const k = `receipt-${randomUUID()}`;
  const first = await post({ name: 'receipt' }, k);
  expect(first.status).toBe(201);
  expect(await gatewayRows(k)).toBe(0);
  const before = await total();
  const retried = await post({ name: 'receipt' }, k);
  expect(retried.status).toBe(201);
  expect(retried.headers.get('idempotent-replay')).toBe('true');
  expect(retried.text).toBe(first.text);
  expect(await total()).toBe(before);
  expect(await gatewayRows(k)).toBe(0);
  await drainEvents();
  expect(eventsFor(first.body.data.id)).toBe(1);
});

(process.env.DATABASE_URL ? it : it.skip)('replays a keyed delete with its first answer, not 404', async () => {
  const created = await post({ name: 'to delete' });
  const k = `delete-${randomUUID()}`;
  const del = () => call(stack.url, 'DELETE', `/v1/samples/${created.body.data.id}`, { token: adminKey, headers: { 'idempotency-key': k } });
  expect((await del()).status).toBe(204);
  const again = await del();
  expect(again.status).toBe(204);
  expect(again.headers.get('idempotent-replay')).toBe('true');
});

it('keeps a refusal of the owning service (404) and replays it, and answers 409 for another request under its key', async () => {
  const k = `refused-${randomUUID()}`;
  const missing = `/v1/samples/${randomUUID()}`;
  const patch = (body: unknown) => call(stack.url, 'PATCH', missing, { token: key, body, headers: { 'idempotency-key': k } });
  const first = await patch({ name: 'nobody' });
  expect(first.status).toBe(404);
  expect(first.headers.get('idempotent-replay')).toBeNull();
  await eventually(async () => {
    const again = await patch({ name: 'nobody' });
    return again.headers.get('idempotent-replay') === 'true' ? again : undefined;
  }).then((again) => expect(again.text).toBe(first.text));
  const other = await patch({ name: 'somebody' });
  expect(other.status).toBe(409);
  expect(other.body.error).toBe('idempotency_key_conflict');
});

it('answers 409 for a request another than the one a write was keyed with, and writes nothing', async () => {
  const k = `other-${randomUUID()}`;
  expect((await post({ name: 'one' }, k)).status).toBe(201);
  const before = await total();
  const other = await post({ name: 'two' }, k);
  expect(other.status).toBe(409);
  expect(other.body).toEqual({ data: null, error: 'idempotency_key_conflict', meta: { message: expect.stringMatching(/different request/) } });
  expect(await total()).toBe(before);
});

/** Runs one statement on the stack's database. */
// eslint-disable-next-line @typescript-eslint/no-unnecessary-type-parameters -- the caller names the row type of its statement
async function onDatabase<T>(text: string, values: unknown[]): Promise<{ rows: T[]; rowCount: number | null }> {
  const db = new Client({ connectionString: stack.databaseUrl });
  await db.connect();
  try {
    return await db.query(text, values);
  } finally {
    await db.end();
  }
}

/** Jobs of the organisation the job belongs to. */
const jobsBeside = async (jobId: string) =>
  (await onDatabase<{ n: number }>(`select count(*)::int as n from jobs.jobs where org_id = (select org_id from jobs.jobs where id = $1)`, [jobId])).rows[0]!.n;

/** A keyed job creation under a key of its own. */
function keyedJob(label: string) {
  const k = `${label}-${randomUUID()}`;
  const body = { job_type: 'box_layout_pdf', input: { rows: 2, cols: 2 } };
  return { k, send: (url = stack.url) => call(url, 'POST', '/v1/jobs', { token: key, body, headers: { 'idempotency-key': k } }) };
}

// Receipts are the kit's, claimed by the first write of any keyed call, so every
// service's writes have them, not only the records engine's.
(process.env.DATABASE_URL ? it : it.skip)('answers the retry of a keyed job with the first job, not a second', async () => {
  const job = keyedJob('abandoned-job');
  const first = await job.send();
  expect(first.status).toBe(202);
  const before = await jobsBeside(first.body.data.id);
  const retried = await job.send();
  expect(retried.status).toBe(202);
  expect(retried.headers.get('idempotent-replay')).toBe('true');
  expect(retried.body.data.id).toBe(first.body.data.id);
  expect(await jobsBeside(first.body.data.id)).toBe(before);
});

(process.env.DATABASE_URL ? it : it.skip)(
  'refuses, with 409 and without writing again, a retry whose first write was applied but whose answer was lost',
  async () => {
    const job = keyedJob('lost-answer');
    const first = await job.send();
    expect(first.status).toBe(202);
    const before = await jobsBeside(first.body.data.id);
    // as a service leaves the receipt that died after committing, before keeping the
    // answer (which is kept just after the call is answered: wait for it, then drop it)
    await eventually(async () =>
      (await onDatabase(`update jobs.call_receipts set answer = null where key = $1 and answer is not null`, [job.k])).rowCount === 1 ? true : undefined,
    );
    // the retry reaches another gateway replica: the one that answered would replay the answer it gave
    const other = await stack.replica();
    try {
      const retried = await job.send(other.url);
      expect(retried.status).toBe(409);
      expect(retried.body.error).toBe('idempotency_key_conflict');
      expect(retried.body.meta.message).toMatch(/answer was lost/);
    } finally {
      await other.stop();
    }
    expect(await jobsBeside(first.body.data.id)).toBe(before);
  },
);

describe('the answers a gateway replica replays itself', () => {
  const receiptOf = (k: string) => onDatabase<{ n: number }>(`select count(*)::int as n from notebook.call_receipts where key = $1`, [k]);

  (process.env.DATABASE_URL ? it : it.skip)('replays a success it answered without asking the service, and another replica asks the receipt', async () => {
    const k = `replica-${randomUUID()}`;
    const first = await post({ name: 'replica-kept', type: 'blood' }, k);
    expect(first.status).toBe(201);
    await eventually(async () => ((await receiptOf(k)).rows[0]!.n === 1 ? true : undefined));
    const other = await stack.replica();
    try {
      // through the other replica: the owning service's receipt answers
      const there = await call(other.url, 'POST', '/v1/samples', {
        token: key,
        body: { name: 'replica-kept', type: 'blood' },
        headers: { 'idempotency-key': k },
      });
      expect(there.status).toBe(201);
      expect(there.headers.get('idempotent-replay')).toBe('true');
      expect(there.text).toBe(first.text);
      // with the receipt gone (a test's trick: it stays 24 hours), the replica that
      // answered still replays what it answered, so it did not ask the service
      await onDatabase(`delete from notebook.call_receipts where key = $1`, [k]);
      const here = await post({ type: 'blood', name: 'replica-kept' }, k);
      expect(here.status).toBe(201);
      expect(here.headers.get('idempotent-replay')).toBe('true');
      expect(here.text).toBe(first.text);
      expect((await receiptOf(k)).rows[0]!.n).toBe(0);
    } finally {
      await other.stop();
    }
  });

  it('keeps a kept key to its request: another payload under it is still the 409', async () => {
    const k = `replica-conflict-${randomUUID()}`;
    expect((await post({ name: 'replica-a', type: 'blood' }, k)).status).toBe(201);
    const other = await post({ name: 'replica-b', type: 'blood' }, k);
    expect(other.status).toBe(409);
    expect(other.body.error).toBe('idempotency_key_conflict');
    // and the first request is still replayed
    const again = await post({ name: 'replica-a', type: 'blood' }, k);
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replay')).toBe('true');
  });

  it('keeps a kept key to its token', async () => {
    const k = `replica-token-${randomUUID()}`;
    const first = await post({ name: 'replica-token', type: 'blood' }, k);
    const theirs = await post({ name: 'replica-token', type: 'blood' }, k, adminKey);
    expect(theirs.status).toBe(201);
    expect(theirs.headers.get('idempotent-replay')).toBeNull();
    expect(theirs.body.data.id).not.toBe(first.body.data.id);
  });
});

(process.env.DATABASE_URL ? it : it.skip)('purges expired records in batches and keeps the rest', async () => {
  const { KeyedRefusals } = await import('../src/idempotency');
  const { DELETE_BATCH, openDatabase } = await import('@lab/kit');
  const org = randomUUID();
  const raw = new Client({ connectionString: stack.databaseUrl });
  await raw.connect();
  const db = await openDatabase({ url: stack.databaseUrl, poolSize: 1 });
  try {
    const expired = 2 * DELETE_BATCH + 7;
    await raw.query(
      `insert into gateway.idempotency (org_id, token_id, key, request_hash, state, created_at)
       select $1::uuid, 'purge-test', 'old-' || n, 'h', 'done', now() - interval '25 hours' from generate_series(1, $2::int) n
       union all
       select $1::uuid, 'purge-test', 'new-' || n, 'h', 'done', now() - interval '23 hours' from generate_series(1, 3) n`,
      [org, expired],
    );
    const gone = await new KeyedRefusals(db).purgeExpired();
    // other tests' records are all fresh: only these expired ones go
    expect(gone).toBe(expired);
    const left = await raw.query(`select key from gateway.idempotency where org_id = $1 order by key`, [org]);
    expect(left.rows.map((r) => r.key)).toEqual(['new-1', 'new-2', 'new-3']);
  } finally {
    await db.close();
    await raw.end();
  }
});
