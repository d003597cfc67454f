import { Metadata, status } from '@grpc/grpc-js';
import {
  DomainError,
  mayHoldHugeNumber,
  changedFields,
  Emitter,
  REDACTED,
  fromServiceError,
  httpStatusOf,
  retryDelayMs,
  signCallerContext,
  systemContext,
  toServiceError,
  topicMatches,
  verifyCallerContext,
  isUuid,
  newId,
  StatementNames,
  statementNaming,
  Batcher,
  MemoryBus,
  createLogger,
  logErr,
  type BusMessage,
} from '@lab/kit';
import { DrizzleQueryError } from 'drizzle-orm/errors';

describe('topicMatches', () => {
  test.each([
    ['sample.*', 'sample.created', true],
    ['sample.*', 'sample.status.changed', false],
    ['equipment.#', 'equipment.usage.started', true],
    ['#', 'anything.at.all', true],
    ['audit.record', 'audit.record', true],
    ['audit.record', 'audit.records', false],
    ['*.created', 'experiment.created', true],
    ['identity.#', 'identity', true],
  ])('%s ~ %s = %s', (p, k, want) => expect(topicMatches(p, k)).toBe(want));
});

describe('error mapping', () => {
  test('a DomainError survives the trip through gRPC metadata', () => {
    const err = DomainError.invalid('bad', { field: 'name' });
    const se = toServiceError(err);
    expect(se.code).toBe(status.INVALID_ARGUMENT);
    const back = fromServiceError(se as never);
    expect(back).toMatchObject({ kind: 'invalid', code: 'validation_failed', message: 'bad', details: { field: 'name' } });
    expect(httpStatusOf(back.kind)).toBe(400);
  });

  test('unknown errors become 500 with an error id and no cause', () => {
    const logged: unknown[] = [];
    const se = toServiceError(new Error('secret detail'), (e) => logged.push(e));
    const back = fromServiceError(se as never);
    expect(back.kind).toBe('internal');
    expect(back.message).not.toContain('secret');
    expect(back.details?.error_id).toEqual(expect.any(String));
    expect(logged).toHaveLength(1);
  });

  test('the status table', () => {
    expect(httpStatusOf('unauthenticated')).toBe(401);
    expect(httpStatusOf('forbidden')).toBe(403);
    expect(httpStatusOf('not_found')).toBe(404);
    expect(httpStatusOf('conflict')).toBe(409);
    expect(httpStatusOf('unprocessable')).toBe(422);
    expect(httpStatusOf('rate_limited')).toBe(429);
    expect(httpStatusOf('unavailable')).toBe(503);
    expect(httpStatusOf('timeout')).toBe(504);
  });

  test('a database outage wrapped by the query layer is still unavailable', () => {
    const driver = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
    const wrapped = new Error('Failed query: select 1', { cause: driver });
    expect(toServiceError(wrapped).code).toBe(status.UNAVAILABLE);
    expect(toServiceError(new Error('Failed query', { cause: new Error('syntax error') })).code).toBe(status.INTERNAL);
  });

  test('a transaction rolled back for a concurrent one (deadlock, serialization) is unavailable, to retry', () => {
    for (const code of ['40P01', '40001']) {
      const driver = Object.assign(new Error('deadlock detected'), { code });
      const se = toServiceError(new Error('Failed query: update x', { cause: driver }));
      expect(se.code).toBe(status.UNAVAILABLE);
      expect(JSON.parse(se.metadata!.get('lab-error-bin')[0]!.toString()).code).toBe('service_unavailable');
    }
  });

  test('a transient database error is unavailable, not internal', () => {
    const se = toServiceError(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }));
    expect(se.code).toBe(status.UNAVAILABLE);
  });
});

describe('caller context signing', () => {
  const secret = 'a-secret-of-some-length';
  test('round trip', () => {
    const md = new Metadata();
    const ctx = { ...systemContext('r1', newId()), user_id: newId(), role: 'admin' };
    signCallerContext(md, ctx, secret);
    expect(verifyCallerContext(md, secret)).toEqual(ctx);
  });
  test('a tampered context is refused', () => {
    const md = new Metadata();
    signCallerContext(md, systemContext('r1'), secret);
    const payload = JSON.parse(Buffer.from(md.get('x-lab-caller')[0] as string, 'base64url').toString());
    payload.role = 'admin';
    md.set('x-lab-caller', Buffer.from(JSON.stringify(payload)).toString('base64url'));
    expect(() => verifyCallerContext(md, secret)).toThrow(DomainError);
  });
  test('a missing or wrongly signed context is refused', () => {
    expect(() => verifyCallerContext(new Metadata(), secret)).toThrow(/missing caller context/);
    const md = new Metadata();
    signCallerContext(md, systemContext('r1'), 'another-secret-entirely');
    expect(() => verifyCallerContext(md, secret)).toThrow(/forged/);
  });
});

test('an audit record never carries a credential in before or after, and still names it as changed', () => {
  const emit = new Emitter('identity', null);
  emit.audit('org', {
    action: 'update',
    resource: 'webhook_subscription',
    record_id: 'x',
    before: { url: 'https://a', secret: 'whsec_old', has_password: true, nested: [{ client_secret_hash: 'abc' }] },
    after: { url: 'https://a', secret: 'whsec_new', password_hash: '$argon2id$v=19$...', token: 'pat_x', token_kind: 'pat', content_hash: 'h' },
  });
  const data = emit.messages[0]!.data as { before: Record<string, unknown>; after: Record<string, unknown>; changed_fields: string[] };
  expect(data.before).toEqual({ url: 'https://a', secret: REDACTED, has_password: true, nested: [{ client_secret_hash: REDACTED }] });
  expect(data.after).toEqual({ url: 'https://a', secret: REDACTED, password_hash: REDACTED, token: REDACTED, token_kind: 'pat', content_hash: 'h' });
  expect(data.changed_fields).toContain('secret');
});

test('changedFields names exactly the fields that differ', () => {
  expect(changedFields({ a: 1, b: 'x', c: [1] }, { a: 1, b: 'y', c: [1, 2], d: null })).toEqual(['b', 'c']);
  expect(changedFields(null, { a: 1 })).toEqual(['a']);
});

test('retry delays grow and stay capped', () => {
  for (let a = 1; a < 20; a++) {
    const d = retryDelayMs(a, 500, 30_000);
    expect(d).toBeGreaterThanOrEqual(Math.min(30_000, 500 * 2 ** (a - 1)) / 2);
    expect(d).toBeLessThanOrEqual(30_000);
  }
});

test('ids are UUIDv7 and time-ordered', () => {
  const a = newId();
  const b = newId();
  expect(isUuid(a)).toBe(true);
  expect(a[14]).toBe('7');
  expect(a < b).toBe(true);
  expect(isUuid('not-a-uuid')).toBe(false);
});

describe('CoalescedRunner', () => {
  test('kicks during a pass coalesce into one more pass; a full pass goes again', async () => {
    const { CoalescedRunner } = await import('@lab/kit');
    let passes = 0;
    let release!: () => void;
    let third!: () => void;
    const reachedThird = new Promise<void>((r) => (third = r));
    const runner = new CoalescedRunner(
      async () => {
        passes++;
        if (passes === 1) await new Promise<void>((r) => (release = r));
        if (passes === 3) third();
        return passes === 2; // the second pass reports a full batch
      },
      () => undefined,
    );
    runner.kick();
    for (let i = 0; i < 5; i++) runner.kick();
    release();
    await reachedThird;
    await runner.stop();
    // first pass, one coalesced pass (full), then one more because it was full
    expect(passes).toBe(3);
    runner.kick();
    expect(passes).toBe(3); // stopped: kicks are refused
  });
});

describe('CoalescedRunner spacing', () => {
  afterEach(() => jest.useRealTimers());

  test('a pass kicked right after another waits out the spacing; a full one does not; stop ends the wait without a pass', async () => {
    jest.useFakeTimers();
    const { CoalescedRunner } = await import('@lab/kit');
    let passes = 0;
    let fullLeft = 0;
    const runner = new CoalescedRunner(
      async () => {
        passes++;
        return fullLeft-- > 0;
      },
      () => undefined,
      undefined,
      { spacingMs: 1_000 },
    );
    runner.kick(); // after a quiet moment: at once
    await jest.advanceTimersByTimeAsync(0);
    expect(passes).toBe(1);
    runner.kick();
    await jest.advanceTimersByTimeAsync(999);
    expect(passes).toBe(1);
    await jest.advanceTimersByTimeAsync(1);
    expect(passes).toBe(2);
    // full batches go again at once, until one is not full
    await jest.advanceTimersByTimeAsync(1_000);
    fullLeft = 3;
    runner.kick();
    await jest.advanceTimersByTimeAsync(0);
    expect(passes).toBe(6);
    const settled = passes;
    runner.kick();
    await jest.advanceTimersByTimeAsync(10);
    expect(passes).toBe(settled);
    await runner.stop();
    await jest.advanceTimersByTimeAsync(5_000);
    expect(passes).toBe(settled);
  });
});

describe('StatementNames', () => {
  const text = 'select * from t where id = $1';

  test('names a statement text the second time it is seen, then always the same', () => {
    const names = new StatementNames();
    expect(names.nameFor(text)).toBeUndefined();
    const name = names.nameFor(text);
    expect(name).toMatch(/^lab_\d+$/);
    expect(names.nameFor(text)).toBe(name);
    expect(names.nameFor('update t set x = $1 where id = $2')).toBeUndefined();
    expect(names.nameFor('update t set x = $1 where id = $2')).not.toBe(name);
  });

  test('never names DDL, transaction control or a text of several commands', () => {
    const names = new StatementNames();
    for (const t of ['begin', 'create table x (a int)', 'set local x = 1', 'commit']) {
      names.nameFor(t);
      expect(names.nameFor(t)).toBeUndefined();
    }
  });

  test('without prepared statements (behind a transaction-mode pooler) names nothing, and drops a name given', () => {
    const nameOf = statementNaming(false);
    for (let i = 0; i < 3; i++) expect(nameOf({ text }, [1])).toBeUndefined();
    expect(nameOf({ text, name: 'drizzle_prepared' }, [1])).toBeUndefined();
  });

  test('with prepared statements names a repeated parameterised text and keeps a name given', () => {
    const nameOf = statementNaming(true);
    expect(nameOf({ text }, [1])).toBeUndefined();
    expect(nameOf({ text }, [1])).toMatch(/^lab_\d+$/);
    expect(nameOf({ text: 'select 1' }, [])).toBeUndefined();
    expect(nameOf({ text: 'select 1' }, [])).toBeUndefined();
    expect(nameOf({ text, name: 'mine' }, [1])).toBe('mine');
  });

  test('stops naming at its bound, so server memory stays bounded', () => {
    const names = new StatementNames();
    const given = new Set<string>();
    for (let i = 0; i < 1000; i++) {
      const t = `select ${i} where $1::int > 0`;
      names.nameFor(t);
      const n = names.nameFor(t);
      if (n) given.add(n);
    }
    expect(given.size).toBe(256);
  });
});

describe('Batcher', () => {
  test('writes items added together in one call and settles each', async () => {
    const calls: number[][] = [];
    const b = new Batcher<number>(async (items) => {
      calls.push(items);
    });
    await Promise.all([1, 2, 3].map((i) => b.add(i)));
    expect(calls).toEqual([[1, 2, 3]]);
  });

  test('a bad item fails alone; its batch neighbours are written', async () => {
    const written: number[] = [];
    const b = new Batcher<number>(async (items) => {
      if (items.includes(2)) throw new Error('bad item');
      written.push(...items);
    });
    const results = await Promise.allSettled([1, 2, 3].map((i) => b.add(i)));
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(written.sort()).toEqual([1, 3]);
  });

  test('each item gets its own result, also when its batch is retried item by item', async () => {
    const b = new Batcher<number, string>(async (items) => {
      if (items.includes(2) && items.length > 1) throw new Error('retry alone');
      return items.map((i) => `r${i}`);
    });
    expect(await Promise.all([1, 2, 3].map((i) => b.add(i)))).toEqual(['r1', 'r2', 'r3']);
  });

  test('never writes more than its batch size at once', async () => {
    const sizes: number[] = [];
    const b = new Batcher<number>(async (items) => {
      sizes.push(items.length);
    }, 2);
    await Promise.all([1, 2, 3, 4, 5].map((i) => b.add(i)));
    expect(sizes).toEqual([2, 2, 1]);
  });
});

describe('caller context signing, reused signatures', () => {
  const secret = 'a-secret-of-some-length';
  test('each call carries its own request id; an insane one is dropped', () => {
    const base = { ...systemContext('r1', newId()), user_id: newId(), role: 'researcher' };
    const a = new Metadata();
    const b = new Metadata();
    signCallerContext(a, base, secret);
    signCallerContext(b, { ...base, request_id: 'r2' }, secret);
    expect(verifyCallerContext(a, secret).request_id).toBe('r1');
    expect(verifyCallerContext(b, secret).request_id).toBe('r2');
    b.set('x-lab-request-id', 'not a sane {request} id');
    expect(verifyCallerContext(b, secret).request_id).toBe('');
  });
  test('a verified signature does not vouch for another payload or another secret', () => {
    const md = new Metadata();
    signCallerContext(md, systemContext('r1'), secret);
    expect(verifyCallerContext(md, secret).token_kind).toBe('system');
    const other = new Metadata();
    signCallerContext(other, { ...systemContext('r1'), role: 'admin' }, secret);
    md.set('x-lab-caller', other.get('x-lab-caller')[0] as string);
    expect(() => verifyCallerContext(md, secret)).toThrow(/forged/);
    const again = new Metadata();
    signCallerContext(again, systemContext('r1'), secret);
    expect(() => verifyCallerContext(again, 'a-different-secret-value')).toThrow(/forged/);
  });
});

describe('MemoryBus refusals', () => {
  const log = createLogger('test', 'silent');
  const msg = (id: string): BusMessage => ({ id, type: 'thing.done', org_id: null, occurred_at: new Date(0).toISOString(), data: {} });

  it('a message its consumer fails on is refused alone, the rest of the batch delivered; after the last attempt the refusal says the consumer gave up', async () => {
    const bus = new MemoryBus(log);
    const handled: string[] = [];
    const batches: string[][] = [];
    await bus.subscribe({
      queue: 'q',
      bindings: ['thing.#'],
      maxAttempts: 2,
      // all or nothing, as consumeWithInbox's transaction: the bad one fails the batch
      handleBatch: async (ms) => {
        if (ms.some((m) => m.id === 'bad')) throw new Error('batch rolled back');
        batches.push(ms.map((m) => m.id));
      },
      handler: async (m) => {
        if (m.id === 'bad') throw new Error('always fails');
        handled.push(m.id);
      },
    });
    expect(await bus.publish([msg('a'), msg('bad'), msg('c')])).toEqual({ refused: [{ id: 'bad', error: 'always fails', transient: false }] });
    expect(handled).toEqual(['a', 'c']);
    expect(await bus.publish([msg('bad'), msg('d')])).toEqual({ refused: [{ id: 'bad', error: 'always fails', deadFor: 'q' }] });
    // a batch that passes goes in one call
    expect(await bus.publish([msg('e'), msg('f')])).toEqual({ refused: [] });
    expect(batches).toEqual([['e', 'f']]);
    expect(handled).toEqual(['a', 'c', 'd']);
  });
});

describe('logErr', () => {
  test('logs the failed statement and its cause without the bound values or the row', () => {
    const pgError = Object.assign(new Error('duplicate key value violates unique constraint "subscriptions_pkey"'), {
      code: '23505',
      constraint: 'subscriptions_pkey',
      detail: 'Key (id)=(whsec_the_secret) already exists.',
    });
    const failed = new DrizzleQueryError('insert into webhooks.subscriptions (id, secret) values ($1, $2)', ['a', 'whsec_the_secret'], pgError);
    const out = logErr(failed) as Record<string, unknown>;
    const text = JSON.stringify({ message: out.message, stack: out.stack, params: out.params });
    expect(text).not.toContain('whsec_the_secret');
    expect(out.message).toContain('insert into webhooks.subscriptions');
    expect(out.message).toContain('params: [redacted]');
    expect(out.message).toContain('subscriptions_pkey');
    const direct = logErr(pgError) as Record<string, unknown>;
    expect([direct.code, direct.constraint, direct.detail]).toEqual(['23505', 'subscriptions_pkey', '[redacted]']);
  });
});

describe('mayHoldHugeNumber (the look before the walk of jsonProblem)', () => {
  it('finds a number JSON.parse makes infinite, wherever it stands', () => {
    for (const text of ['1e309', '{"v":12E+400}', '[-1e0309]', `{"v":${'9'.repeat(309)}}`, '1'.repeat(400), `{"a":1,"b":${'7'.repeat(309)}.5}`]) {
      expect(mayHoldHugeNumber(text)).toBe(true);
    }
  });

  it('passes what parses finite: runs of at most 308 digits, small exponents, digits in text', () => {
    for (const text of [
      '1e99',
      '{"v":1e+99}',
      `{"v":${'9'.repeat(308)}}`,
      `{"a":${'1'.repeat(200)},"b":${'2'.repeat(200)}}`,
      '{"measured_at":"2026-11-26T12:00:00.123456Z"}',
    ]) {
      expect(mayHoldHugeNumber(text)).toBe(false);
    }
  });
});
