import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describeWithServers, startStack, type Stack } from '@lab/testing';
import { call, eventually } from './http';

/**
 * The dead letters of every service's outbox through the management API: listed
 * across services with the list envelope, replayed back into the outbox they came
 * from (and published from there), for the operator only.
 */
let stack: Stack;
let db: pg.Client | undefined;

const op = (method: string, path: string, token?: string) => call(stack.url, method, `/admin/v1${path}`, { token: token ?? stack.operatorToken });

beforeAll(async () => {
  stack = await startStack();
  if (stack.databaseUrl) {
    db = new pg.Client({ connectionString: stack.databaseUrl });
    await db.connect();
  }
});

afterAll(async () => {
  await db?.end();
  await stack?.stop();
});

/** A message set aside in a service's schema, as its relay leaves it. */
async function park(schema: string, minutesAgo: number): Promise<string> {
  const id = randomUUID();
  const message = { id, type: 'thing.parked', org_id: null, occurred_at: new Date().toISOString(), data: { schema } };
  await db!.query(
    `insert into ${schema}.dead_letters (id, type, message, queue, error, attempts, created_at, parked_at)
     values ($1, 'thing.parked', $2, 'some.consumer', 'cannot read this one', 8, now() - interval '1 hour', now() - $3 * interval '1 minute')`,
    [id, JSON.stringify(message), minutesAgo],
  );
  return id;
}

const describePg = (title: string, body: () => void) => describeWithServers(['postgres'], title, body);
describePg('dead letters', () => {
  it('are the operator’s only', async () => {
    expect((await op('GET', '/dead-letters', 'not-the-operator-token')).status).toBe(401);
    expect((await call(stack.url, 'POST', `/admin/v1/dead-letters/${randomUUID()}/replay`)).status).toBe(401);
  });

  it('are listed across services, page by page, and one replayed goes back to its outbox and out', async () => {
    const notebookOld = await park('notebook', 30);
    const notebookNew = await park('notebook', 5);
    const audit = await park('audit', 10);

    const first = await op('GET', '/dead-letters?limit=2');
    expect(first.status).toBe(200);
    expect(first.body.pagination).toEqual({ limit: 2, offset: 0, total: 3 });
    const second = await op('GET', '/dead-letters?limit=2&offset=2');
    expect(second.body.pagination).toEqual({ limit: 2, offset: 2, total: 3 });
    const all = [...first.body.data, ...second.body.data];
    expect(all.map((d: { id: string }) => d.id).sort()).toEqual([notebookOld, notebookNew, audit].sort());
    // within a service, the latest set aside first
    const notebook = all.filter((d: { service: string }) => d.service === 'notebook').map((d: { id: string }) => d.id);
    expect(notebook).toEqual([notebookNew, notebookOld]);
    expect(all.find((d: { id: string }) => d.id === audit)).toMatchObject({
      service: 'audit',
      type: 'thing.parked',
      queue: 'some.consumer',
      error: 'cannot read this one',
      attempts: 8,
      // UTC to the microsecond, as the services have always written them
      created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/),
      parked_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/),
      message: { id: audit, type: 'thing.parked', data: { schema: 'audit' } },
    });

    const replayed = await op('POST', `/dead-letters/${notebookOld}/replay`);
    expect([replayed.status, replayed.body.data]).toEqual([202, { id: notebookOld, service: 'notebook', replayed: true }]);
    // out of the dead letters, through the outbox (published: the row is gone)
    expect((await op('GET', '/dead-letters')).body.pagination.total).toBe(2);
    await eventually(async () => ((await db!.query('select 1 from notebook.outbox where id = $1', [notebookOld])).rowCount === 0 ? true : undefined));
    expect((await op('POST', `/dead-letters/${notebookOld}/replay`)).status).toBe(404);
    expect((await op('POST', '/dead-letters/not-a-uuid/replay')).status).toBe(400);
    expect((await op('GET', '/dead-letters?limit=500')).status).toBe(400);
  });
});
