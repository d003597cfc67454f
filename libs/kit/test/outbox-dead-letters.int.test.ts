import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { consumeWithInbox, createLogger, Emitter, MemoryBus, migrate, newId, openDatabase, Outbox, type Database } from '@lab/kit';
import { dropFreshDatabases, freshDatabaseUrl } from '../../../testing/src/backing';

/**
 * The in-process bus's path (the embedded process): a message a consumer keeps
 * failing on holds back no other message of its relay batch, and after its last
 * attempt it is moved to the service's durable dead-letter table, listed and
 * replayed from there.
 */
const log = createLogger('test', 'silent');
let db: Database;

beforeAll(async () => {
  db = await openDatabase({ url: await freshDatabaseUrl(), dataDir: `/tmp/lab-kit-${newId()}` });
  await migrate(db, 'kit_test', join(__dirname, 'fixtures', 'migrations'));
});

afterAll(async () => {
  await db.close();
  await dropFreshDatabases();
});

const count = async (table: string) => (await db.rows<{ n: number }>(sql.raw(`select count(*)::int as n from kit_test.${table}`)))[0]!.n;
/** The relay's backoff passed: the next pass takes every row. */
const due = () => db.orm.execute(sql`update kit_test.outbox set next_attempt_at = now()`);

test('a message its consumer keeps failing on is set aside durably, the rest of its batch delivered; an operator lists and replays it', async () => {
  const bus = new MemoryBus(log);
  let broken = true;
  // what the consumer did, written in its transaction (rolled back with it)
  const handled = async () => (await db.rows<{ name: string }>(sql`select name from kit_test.things order by name`)).map((r) => r.name);
  await consumeWithInbox({
    bus,
    db,
    schema: 'kit_test',
    queue: 'kit-dl.things',
    bindings: ['thing.#'],
    maxAttempts: 3,
    handler: async (tx, msg) => {
      if (broken && (msg.data as { name: string }).name === 'poison') throw new Error('cannot read this one');
      await tx.execute(sql`insert into kit_test.things (id, name) values (${newId()}::uuid, ${(msg.data as { name: string }).name})`);
    },
  });
  const outbox = new Outbox({ service: 'kit-dl', schema: 'kit_test', db, bus, log });
  // committed without kicking a relay: the test drives the passes
  const emit = new Emitter('kit-dl', null);
  for (const name of ['a', 'poison', 'b']) emit.event('thing.created', null, { name });
  await db.tx((tx) => outbox.insert(tx, emit.messages));

  // one pass: the two good ones delivered and gone, the poison one kept with a backoff
  expect(await outbox.drainOnce()).toBe(2);
  expect(await handled()).toEqual(['a', 'b']);
  const [kept] = await db.rows<{ type: string; attempts: number; later: boolean }>(
    sql`select type, attempts, next_attempt_at > now() as later from kit_test.outbox`,
  );
  expect(kept).toEqual({ type: 'thing.created', attempts: 1, later: true });

  // its last attempt moves it to the dead-letter table
  await due();
  expect(await outbox.drainOnce()).toBe(0);
  await due();
  expect(await outbox.drainOnce()).toBe(1);
  expect(await count('outbox')).toBe(0);

  // durable: another relay on the same schema (a restarted process) lists it
  const restarted = new Outbox({ service: 'kit-dl', schema: 'kit_test', db, bus, log });
  await restarted.stop(Date.now()); // no relay of its own: replay's kick does nothing, the test drives the pass
  const listed = await restarted.deadLetters(50, 0);
  expect(listed.total).toBe(1);
  expect(listed.data[0]).toMatchObject({
    type: 'thing.created',
    queue: 'kit-dl.things',
    error: 'cannot read this one',
    message: { type: 'thing.created', data: { name: 'poison' } },
  });

  // replayed once the consumer is fixed: delivered with its own id, the table empty
  broken = false;
  const id = listed.data[0]!.id;
  expect(await restarted.replayDeadLetter(id)).toBe(true);
  expect(await restarted.replayDeadLetter(id)).toBe(false);
  expect(await restarted.drainOnce()).toBe(1);
  expect(await handled()).toEqual(['a', 'b', 'poison']);
  expect(await count('dead_letters')).toBe(0);
  expect(await count('outbox')).toBe(0);
  await bus.close();
});
