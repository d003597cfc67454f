import { AnsweredKeys } from '../src/answered-keys';

const scope = { org_id: '0190d5a1-0000-7000-8000-000000000001', token_id: 'tok-1', key: 'key-00000001' };

describe('AnsweredKeys', () => {
  it('replays a kept success for the same request only, marked as a replay', () => {
    const kept = new AnsweredKeys();
    kept.remember(scope, 'h1', { status: 201, body: '{"data":{}}', contentType: 'application/json', headers: { Location: '/v1/samples/x' } });
    expect(kept.replay(scope, 'h1')).toEqual({
      status: 201,
      body: '{"data":{}}',
      contentType: 'application/json',
      headers: { Location: '/v1/samples/x', 'Idempotent-Replay': 'true' },
    });
    expect(kept.replay(scope, 'h2')).toBeUndefined();
    expect(kept.replay({ ...scope, token_id: 'tok-2' }, 'h1')).toBeUndefined();
    expect(kept.replay({ ...scope, org_id: '0190d5a1-0000-7000-8000-000000000002' }, 'h1')).toBeUndefined();
    // the organisation's id in either case is the same organisation
    expect(kept.replay({ ...scope, org_id: scope.org_id.toUpperCase() }, 'h1')?.status).toBe(201);
  });

  it('keeps no refusal, failure or stream', () => {
    const kept = new AnsweredKeys();
    for (const status of [400, 404, 409, 422, 500, 503]) {
      kept.remember({ ...scope, key: `k-${status}-0000` }, 'h', { status, body: '{}' });
      expect(kept.replay({ ...scope, key: `k-${status}-0000` }, 'h')).toBeUndefined();
    }
    kept.remember(scope, 'h', { status: 200, stream: async () => undefined });
    expect(kept.replay(scope, 'h')).toBeUndefined();
  });

  it('leaves out an answer over the entry limit, and forgets the oldest past the memory limit', () => {
    const kept = new AnsweredKeys({ maxBytes: 8 * 1024, maxEntryBytes: 2 * 1024 });
    kept.remember(scope, 'h', { status: 201, body: 'x'.repeat(3 * 1024) });
    expect(kept.replay(scope, 'h')).toBeUndefined();
    // multi-byte text counts by its UTF-8 bytes: 1,000 characters of 3 bytes are over 2 KiB
    kept.remember(scope, 'h', { status: 201, body: '€'.repeat(1000) });
    expect(kept.replay(scope, 'h')).toBeUndefined();
    for (let i = 0; i < 10; i++) kept.remember({ ...scope, key: `key-${i}-0000` }, 'h', { status: 201, body: Buffer.alloc(1024) });
    expect(kept.replay({ ...scope, key: 'key-0-0000' }, 'h')).toBeUndefined();
    expect(kept.replay({ ...scope, key: 'key-9-0000' }, 'h')?.status).toBe(201);
  });

  it('forgets an answer after its time', () => {
    let now = 10_000;
    const kept = new AnsweredKeys({ ttlMs: 1_000, clock: { now: () => now } });
    kept.remember(scope, 'h', { status: 201, body: '{}' });
    now = 10_500;
    // a replay does not lengthen it
    expect(kept.replay(scope, 'h')?.status).toBe(201);
    now = 11_100;
    expect(kept.replay(scope, 'h')).toBeUndefined();
  });
});
