import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { records } from '@lab/contracts';
import {
  createLogger,
  GrpcServer,
  MemoryBus,
  migrate,
  newId,
  openDatabase,
  Outbox,
  Receipts,
  requestScope,
  RpcClient,
  systemContext,
  type CallerContext,
  type Database,
  type Handlers,
} from '@lab/kit';
import { dropFreshDatabases, freshDatabaseUrl } from '../../../testing/src/backing';
import { waitFor } from '../../../testing/src/waits';

// The receipts of keyed calls, end to end within the kit: a GrpcServer and an
// Outbox sharing Receipts, as runService wires them, on a real database.

const log = createLogger('test', 'silent');
const secret = 'a-secret-of-some-length';
let db: Database;
let server: GrpcServer;
let client: RpcClient<typeof records.RecordServiceService>;
/** what createRecord does; each test sets it (the request body's name is the row's name) */
let create: (name: string) => Promise<unknown>;
let write: (name: string) => Promise<unknown>;
let outboxOf: Outbox;

beforeAll(async () => {
  db = await openDatabase({ url: await freshDatabaseUrl(), dataDir: `/tmp/lab-kit-${newId()}` });
  await migrate(db, 'kit_test', join(__dirname, 'fixtures', 'migrations'));
  const receipts = new Receipts(db, 'kit_test', log);
  const outbox = new Outbox({ service: 'kit-test', schema: 'kit_test', db, bus: new MemoryBus(log), log, receipts });
  const insert = (name: string) =>
    outbox.write(null, async (tx) => {
      await tx.execute(sql`insert into kit_test.things (id, name) values (${newId()}::uuid, ${name})`);
    });
  server = new GrpcServer({ name: 'test', logger: log, secret, receipts });
  const handlers = new Proxy({} as Handlers<typeof records.RecordServiceService>, {
    get: (_t, method) =>
      method === 'createRecord'
        ? async (req: records.CreateRecordRequest) =>
            ((await create(String(req.body?.name))) as records.RecordResponse | undefined) ?? answerOf(String(req.body?.name), new Date().toISOString())
        : async () => ({}),
  });
  server.add(records.RecordServiceService, handlers);
  client = new RpcClient(records.RecordServiceClient, `127.0.0.1:${await server.listen('127.0.0.1:0')}`, { secret });
  write = insert;
  create = insert;
  outboxOf = outbox;
});

afterAll(async () => {
  client?.close();
  await server?.shutdown(1_000);
  await db?.close();
  await dropFreshDatabases();
});

/** The answer of a call: a record named as the call asked, with a status telling answers apart (a time, say). */
const answerOf = (name: string, status: unknown) => ({ record: { kind: { $case: 'sample' as const, value: { id: '', name, status: status as string } } } });

const caller = (key?: string): CallerContext => ({
  ...systemContext(`req-${newId()}`, '00000000-0000-4000-8000-000000000001'),
  token_id: 'token-1',
  ...(key ? { idempotency_key: key } : {}),
});
const send = (name: string, key?: string) => client.call('createRecord', { resource: 'things', body: { name }, parent_id: '' }, caller(key));
const named = async (name: string) => (await db.rows<{ n: number }>(sql`select count(*)::int as n from kit_test.things where name = ${name}`))[0]!.n;
const receiptsOf = async (key: string) =>
  db.rows<{ answered: boolean }>(sql`select answer is not null as answered from kit_test.call_receipts where key = ${key}`);
/** The key's one receipt, once its answer is kept (the call is answered without waiting for that). */
async function answered(key: string): Promise<void> {
  await waitFor(`the receipt of ${key} to keep its answer`, async () => (await receiptsOf(key))[0]?.answered, 5_000);
  expect(await receiptsOf(key)).toEqual([{ answered: true }]);
}

test('a retry of a keyed call that wrote gets the first answer, and its own write is rolled back', async () => {
  create = (name) => write(name);
  const key = `key-${newId()}`;
  const first = await send('once', key);
  await answered(key);
  const again = await send('once', key); // the gateway lost the first answer and called again
  expect(again).toEqual(first); // the very answer (its timestamp too), not a second run's
  expect(await named('once')).toBe(1);
});

test('a keyed call that wrote and then failed releases its claim: the retry runs again', async () => {
  const key = `key-${newId()}`;
  create = async (name) => {
    await write(name);
    throw new Error('failed after its first write');
  };
  await expect(send('partial', key)).rejects.toThrow();
  expect(await receiptsOf(key)).toEqual([]);
  create = (name) => write(name);
  await expect(send('partial', key)).resolves.toMatchObject(answerOf('partial', expect.any(String)));
  expect(await named('partial')).toBe(2); // as without receipts: the failed call's write stays
});

test('only the first of the writes of one keyed call claims the key, also when they run at once', async () => {
  const key = `key-${newId()}`;
  create = async (name) => {
    await Promise.all([write(name), write(name)]);
    await write(name);
  };
  await send('three', key);
  expect(await named('three')).toBe(3);
  await answered(key);
});

test('calls without a key keep no receipt', async () => {
  create = (name) => write(name);
  const before = (await db.rows<{ n: number }>(sql`select count(*)::int as n from kit_test.call_receipts`))[0]!.n;
  await send('unkeyed');
  await send('unkeyed');
  expect(await named('unkeyed')).toBe(2);
  expect((await db.rows<{ n: number }>(sql`select count(*)::int as n from kit_test.call_receipts`))[0]!.n).toBe(before);
});

test('a retry that comes before the first answer is kept waits for it', async () => {
  create = (name) => write(name);
  const key = `key-${newId()}`;
  // both at once: the second's claim waits for the first's transaction, then finds its answer
  const [a, b] = await Promise.all([send('together', key), send('together', key)]);
  expect(b).toEqual(a);
  expect(await named('together')).toBe(1);
});

test('a write that gives the answer keeps it in its own transaction: it is there the moment the write commits', async () => {
  const key = `key-${newId()}`;
  let committed = false;
  create = async (name) => {
    const answer = answerOf(name, 'kept with the write');
    await outboxOf.write(
      null,
      (tx) => tx.execute(sql`insert into kit_test.things (id, name) values (${newId()}::uuid, ${name})`),
      () => answer,
    );
    committed = true;
    // as if the process died here: the answer must already be stored
    expect(await receiptsOf(key)).toEqual([{ answered: true }]);
    return answer;
  };
  const first = await send('in-tx', key);
  expect(committed).toBe(true);
  create = (name) => write(name);
  expect(await send('in-tx', key)).toEqual(first);
  expect(await named('in-tx')).toBe(1);
});

test('the write of a retry meets the claim as a conflict on the key, before its own statements run', async () => {
  const key = `key-${newId()}`;
  create = (name) => write(name);
  await send('claimed', key);
  await answered(key);
  // a retry's write, run directly under the same key: the claim is its first statement
  const scope = { request_id: 'r', caller: caller(), idempotency_key: key };
  await expect(requestScope.run(scope, () => write('claimed'))).rejects.toMatchObject({ kind: 'conflict', code: 'idempotency_key_conflict' });
  expect(await named('claimed')).toBe(1);
});
