import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { Server, ServerCredentials } from '@grpc/grpc-js';
import { batch, records } from '@lab/contracts';
import { createLogger, DomainError, GrpcServer, newId, RpcClient, systemContext, type CallerContext, type Handlers } from '@lab/kit';

type GetRecord = records.GetRecordRequest;
const secret = 'a-secret-of-some-length';
const org = newId();
const alice: CallerContext = { ...systemContext('req-alice', org), token_kind: 'pat', token_id: newId(), user_id: newId(), role: 'admin', scopes: ['*'] };
const bob: CallerContext = { ...alice, token_id: newId(), user_id: newId(), request_id: 'req-bob' };

/** a sample named for what the handler saw: its id and the caller's request id */
const sample = (id: string, requestId: string): records.RecordResponse => ({
  record: { kind: { $case: 'sample', value: { id, name: requestId, status: 'active' } } },
});
const seen = (r: records.RecordResponse) => (r.record?.kind?.$case === 'sample' ? r.record.kind.value : undefined);

/** what each GetRecord call saw: its request and caller */
const handled: { req: GetRecord; caller: CallerContext }[] = [];
const getRecord = async (req: GetRecord, caller: CallerContext): Promise<records.RecordResponse> => {
  handled.push({ req, caller });
  if (req.id === 'missing') throw DomainError.notFound('no such sample', 'sample_not_found');
  if (req.id === 'bad') throw DomainError.invalid('id is not a uuid', { field: 'id' });
  if (req.id === 'boom') throw new Error('a bug');
  // an answer of 20 MB: four of them pass the largest message (64 MiB), one does not
  if (req.id.startsWith('large')) return sample(req.id, 'x'.repeat(20_000_000));
  return sample(req.id, caller.request_id);
};

let server: GrpcServer;
let address: string;
beforeAll(async () => {
  server = new GrpcServer({ name: 'test', logger: createLogger('test', 'silent'), secret });
  const handlers = new Proxy({} as Handlers<typeof records.RecordServiceService>, {
    get: (_t, method) => (method === 'getRecord' ? getRecord : async () => ({})),
  });
  server.add(records.RecordServiceService, handlers);
  address = `127.0.0.1:${await server.listen('127.0.0.1:0')}`;
});
afterAll(async () => {
  await server.shutdown(1_000);
});

/** HTTP/2 streams the servers of this process were opened: one per gRPC call that reached them */
let streams = 0;
const countStream = () => {
  streams++;
};
beforeAll(() => subscribe('http2.server.stream.created', countStream));
afterAll(() => unsubscribe('http2.server.stream.created', countStream));
beforeEach(() => {
  handled.length = 0;
  streams = 0;
});

const client = (batched: string[] = ['getRecord'], to = address) => new RpcClient(records.RecordServiceClient, to, { secret, batched });
const get = (c: RpcClient<typeof records.RecordServiceService>, id: string, caller: CallerContext) =>
  c.call('getRecord', { resource: 'samples', id, parent_id: '' }, caller);
const withRequestId = (caller: CallerContext, i: number) => ({ ...caller, request_id: `${caller.request_id}-${i}` });

describe('call batches', () => {
  it('sends the reads of one caller begun in one turn as one call, each answered as alone with its own request id', async () => {
    const c = client();
    try {
      await get(c, 'warm-up', alice); // the connection is made
      streams = 0;
      handled.length = 0;
      const answers = await Promise.all(Array.from({ length: 10 }, (_, i) => get(c, `id-${i}`, withRequestId(alice, i))));
      expect(streams).toBe(1);
      expect(answers.map(seen)).toEqual(Array.from({ length: 10 }, (_, i) => ({ id: `id-${i}`, name: `req-alice-${i}`, status: 'active' })));
      expect(handled).toHaveLength(10);
      for (const h of handled) {
        expect(h.caller).toMatchObject({ org_id: org, user_id: alice.user_id, token_id: alice.token_id, role: 'admin' });
        expect(h.req.resource).toBe('samples');
      }
    } finally {
      c.close();
    }
  });

  it('fails each call alone with the error it would have had alone, the others answered', async () => {
    const alone = client([]);
    const batched = client();
    try {
      const ids = ['a', 'missing', 'b', 'bad', 'boom'];
      const settle = (c: typeof alone) => Promise.allSettled(ids.map((id) => get(c, id, alice)));
      const [single, together] = [await settle(alone), await settle(batched)];
      const shape = (r: PromiseSettledResult<records.RecordResponse>) =>
        r.status === 'fulfilled'
          ? seen(r.value)?.id
          : (() => {
              const e = r.reason as DomainError;
              expect(e).toBeInstanceOf(DomainError);
              // an unexpected error carries a fresh error id each time
              const details = e.code === 'internal_error' ? { error_id: expect.any(String) } : e.details;
              return { kind: e.kind, code: e.code, message: e.message, details, upstream: e.upstream };
            })();
      expect(together.map(shape)).toEqual(single.map(shape));
      expect(together.map(shape)).toEqual([
        'a',
        expect.objectContaining({ kind: 'not_found', code: 'sample_not_found', message: 'no such sample' }),
        'b',
        expect.objectContaining({ kind: 'invalid', code: 'validation_failed', details: { field: 'id' } }),
        expect.objectContaining({ kind: 'internal', code: 'internal_error' }),
      ]);
    } finally {
      alone.close();
      batched.close();
    }
  });

  it('keeps callers apart, sends a keyed call and a method not listed alone, and a turn of one call alone', async () => {
    const c = client();
    try {
      await get(c, 'warm-up', alice);
      streams = 0;
      await Promise.all([get(c, '1', alice), get(c, '2', alice), get(c, '3', bob), get(c, '4', bob)]);
      expect(streams).toBe(2);

      streams = 0;
      const keyed = { ...alice, idempotency_key: 'key-of-some-length', request_hash: 'a'.repeat(64) };
      await Promise.all([get(c, '5', keyed), get(c, '6', keyed)]);
      expect(streams).toBe(2);

      const unlisted = client([]);
      await get(unlisted, 'warm-up', alice);
      streams = 0;
      await Promise.all([get(unlisted, '6', alice), get(unlisted, '7', alice)]).finally(() => unlisted.close());
      expect(streams).toBe(2);

      streams = 0;
      handled.length = 0;
      expect(seen(await get(c, '8', alice))).toEqual({ id: '8', name: 'req-alice', status: 'active' });
      expect(streams).toBe(1);
    } finally {
      c.close();
    }
  });

  it('sends at most 32 calls in a batch', async () => {
    const c = client();
    try {
      await get(c, 'warm-up', alice);
      streams = 0;
      handled.length = 0;
      const answers = await Promise.all(Array.from({ length: 70 }, (_, i) => get(c, `id-${i}`, alice)));
      expect(answers.map((a) => seen(a)?.id)).toEqual(Array.from({ length: 70 }, (_, i) => `id-${i}`));
      expect(streams).toBe(3);
    } finally {
      c.close();
    }
  });

  it('refuses a batch over 32 calls, a keyed batch and one of a method it does not serve, as a whole', async () => {
    const raw = new RpcClient(batch.BatchServiceClient, address, { secret });
    const encode = (id: string) => Buffer.from(records.GetRecordRequest.encode({ resource: 'samples', id, parent_id: '' }).finish());
    const calls = (n: number) => Array.from({ length: n }, (_, i) => ({ request: encode(`id-${i}`), request_id: `r-${i}` }));
    const path = records.RecordServiceService.getRecord.path;
    try {
      await expect(raw.call('callBatch', { method: path, calls: calls(33) }, alice)).rejects.toMatchObject({ kind: 'invalid' });
      await expect(raw.call('callBatch', { method: path, calls: calls(2) }, { ...alice, idempotency_key: 'key-of-some-length' })).rejects.toMatchObject({
        kind: 'invalid',
      });
      await expect(raw.call('callBatch', { method: '/lab.common.v1.RecordService/Nope', calls: calls(2) }, alice)).rejects.toMatchObject({
        upstream: { grpc_code: 'UNIMPLEMENTED' },
      });
      await expect(raw.call('callBatch', { method: path, calls: calls(2) }, { ...alice, org_id: newId() }, 1_000)).resolves.toMatchObject({
        outcomes: [{ outcome: { $case: 'response' } }, { outcome: { $case: 'response' } }],
      });
      expect(handled).toHaveLength(2);
    } finally {
      raw.close();
    }
  });

  it('refuses a batch whose caller is not signed with the secret', async () => {
    const forger = new RpcClient(records.RecordServiceClient, address, { secret: 'another-secret-of-length', batched: ['getRecord'] });
    try {
      const results = await Promise.allSettled([get(forger, '1', alice), get(forger, '2', alice)]);
      for (const r of results) expect(r).toMatchObject({ status: 'rejected', reason: { kind: 'unauthenticated', code: 'invalid_caller_context' } });
      expect(handled).toHaveLength(0);
    } finally {
      forger.close();
    }
  });

  it('sends the calls alone to a server without batches (a replica of an earlier version)', async () => {
    const old = new Server();
    old.addService(records.RecordServiceService, {
      getRecord: (call: { request: GetRecord }, cb: (err: null, res: records.RecordResponse) => void) => cb(null, sample(call.request.id, 'old')),
    });
    const port = await new Promise<number>((resolve, reject) =>
      old.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    );
    const c = client(['getRecord'], `127.0.0.1:${port}`);
    try {
      await get(c, 'warm-up', alice);
      streams = 0;
      const answers = await Promise.all([get(c, '1', alice), get(c, '2', alice), get(c, '3', alice)]);
      expect(answers.map((a) => seen(a)?.id)).toEqual(['1', '2', '3']);
      // the batch, refused, then the three alone
      expect(streams).toBe(4);
      streams = 0;
      await Promise.all([get(c, '4', alice), get(c, '5', alice)]);
      expect(streams).toBe(2);
    } finally {
      c.close();
      old.forceShutdown();
    }
  });

  it('sends the calls alone again when their answers together pass the largest message', async () => {
    const c = client();
    try {
      await get(c, 'warm-up', alice);
      streams = 0;
      const answers = await Promise.all(['large-1', 'large-2', 'large-3', 'large-4'].map((id) => get(c, id, alice)));
      expect(answers.map((a) => [seen(a)?.id, seen(a)?.name.length])).toEqual(['large-1', 'large-2', 'large-3', 'large-4'].map((id) => [id, 20_000_000]));
      expect(streams).toBe(5);
      // batches go on for what fits
      streams = 0;
      await Promise.all([get(c, '1', alice), get(c, '2', alice)]);
      expect(streams).toBe(1);
    } finally {
      c.close();
    }
  });

  it('fails every call of a batch that cannot reach the server as each would fail alone', async () => {
    const gone = new GrpcServer({ name: 'gone', logger: createLogger('test', 'silent'), secret });
    const port = await gone.listen('127.0.0.1:0');
    await gone.shutdown(0);
    const c = new RpcClient(records.RecordServiceClient, `127.0.0.1:${port}`, { secret, batched: ['getRecord'], deadlineMs: 2_000 });
    try {
      const results = await Promise.allSettled([get(c, '1', alice), get(c, '2', alice)]);
      for (const r of results) expect(r).toMatchObject({ status: 'rejected', reason: { kind: 'unavailable', upstream: { grpc_code: 'UNAVAILABLE' } } });
      // each call has an error of its own
      const [a, b] = results as PromiseRejectedResult[];
      expect(a.reason).not.toBe(b.reason);
    } finally {
      c.close();
    }
  });

  it('counts batches and the calls in them', async () => {
    const { metrics } = await import('@lab/kit');
    const value = async (m: 'callBatches' | 'batchedCalls') => (await metrics()[m].get()).values.reduce((n, v) => n + v.value, 0);
    const [batches, calls] = [await value('callBatches'), await value('batchedCalls')];
    const c = client();
    try {
      await Promise.all(Array.from({ length: 5 }, (_, i) => get(c, `id-${i}`, alice)));
      expect((await value('callBatches')) - batches).toBe(1);
      expect((await value('batchedCalls')) - calls).toBe(5);
    } finally {
      c.close();
    }
  });
});
