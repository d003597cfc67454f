import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { createLogger, MemoryBus } from '@lab/kit';
import { waitFor } from '@lab/testing/waits';
import { JobEventsHub, MAX_BUFFERED_BYTES, MAX_STREAMS_PER_TOKEN, type JobEventsOptions, type StreamPrincipal } from '../src/job-stream';

/**
 * The hub against real responses: a real HTTP server, real client sockets
 * (a client that does not read is a socket that is paused).
 */
const log = createLogger('test', 'silent');
const ORG = '0190a0c8-0000-7000-8000-000000000001';
const admin = { org_id: ORG, user_id: 'u-1', role: 'admin', scopes: ['read'], token_kind: 'pat', token_id: 't-1' } as unknown as StreamPrincipal;

interface Harness {
  hub: JobEventsHub;
  bus: MemoryBus;
  server: Server;
  port: number;
  /** responses the server handed to the hub, in arrival order */
  responses: ServerResponse[];
  /** 'error' events of those responses (a write after end() lands here) */
  errors: Error[];
  attached: Promise<void>[];
  clients: Socket[];
  /** who the next requests' streams belong to, in arrival order */
  principals: StreamPrincipal[];
}

let h: Harness | undefined;

async function harness(opts: JobEventsOptions & { attachAfterClose?: boolean } = {}): Promise<Harness> {
  const hub = new JobEventsHub(log, opts);
  const bus = new MemoryBus(log);
  await hub.subscribe(bus);
  const responses: ServerResponse[] = [];
  const errors: Error[] = [];
  const attached: Promise<void>[] = [];
  const principals: StreamPrincipal[] = [];
  const server = createServer((_req: IncomingMessage, res: ServerResponse) => {
    responses.push(res);
    const who = principals.shift() ?? admin;
    // Recorded instead of crashing the test process, so the test can say what happened.
    res.on('error', (err) => errors.push(err));
    res.setHeader('Content-Type', 'text/event-stream');
    if (opts.attachAfterClose) res.on('close', () => attached.push(hub.attach(who, res)));
    else attached.push(hub.attach(who, res));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  h = { hub, bus, server, port: (server.address() as AddressInfo).port, responses, errors, attached, clients: [], principals };
  return h;
}

/** A client that sends the request and then reads nothing (or reads, when asked). */
async function client(t: Harness, read = false, who = admin): Promise<{ socket: Socket; received: () => string }> {
  t.principals.push(who);
  const s = connect(t.port, '127.0.0.1');
  t.clients.push(s);
  let got = '';
  if (read) s.on('data', (c: Buffer) => (got += c.toString()));
  else s.pause();
  await once(s, 'connect');
  s.write('GET /v1/realtime/background_jobs HTTP/1.1\r\nHost: test\r\n\r\n');
  await waitFor('the server to take the request', () => t.responses.length >= t.clients.length, { intervalMs: 5 });
  return { socket: s, received: () => got };
}

let seq = 0;
const event = (size = 64, org = ORG) => ({
  id: `m-${++seq}`,
  type: 'job.updated',
  org_id: org,
  occurred_at: new Date().toISOString(),
  data: { job: { id: `job-${seq}`, pad: 'x'.repeat(size) }, created_by: 'someone-else' },
});

afterEach(async () => {
  jest.useRealTimers();
  if (!h) return;
  for (const s of h.clients) s.destroy();
  h.server.closeAllConnections();
  await new Promise((r) => h!.server.close(r));
  h = undefined;
});

describe('JobEventsHub', () => {
  it('delivers events to a reading client', async () => {
    const t = await harness();
    const c = await client(t, true);
    await t.bus.publish([event()]);
    await waitFor('the event at the client', () => c.received().includes('event: job.updated'), { intervalMs: 5 });
    expect(c.received()).toContain(': connected to background_jobs');
    expect(t.hub.size).toBe(1);
  });

  it("holds back an update of a job older than one already sent: the job's status never goes back", async () => {
    const t = await harness();
    const c = await client(t, true);
    const update = (status: string, updated_at: string) => ({
      id: `m-${++seq}`,
      type: 'job.updated',
      org_id: ORG,
      occurred_at: new Date().toISOString(),
      data: { job: { id: 'job-ordered', status }, created_by: 'someone-else', updated_at },
    });
    // the worker's `running` came first; the API's `queued`, made before it, arrives after
    await t.bus.publish([update('running', '2026-11-27T06:00:00.000200Z')]);
    await t.bus.publish([update('queued', '2026-11-27T06:00:00.000100Z')]);
    await t.bus.publish([update('succeeded', '2026-11-27T06:00:01.000000Z')]);
    await waitFor('the last update at the client', () => c.received().includes('"succeeded"'), { intervalMs: 5 });
    const statuses = [...c.received().matchAll(/"status":"(\w+)"/g)].map((m) => m[1]);
    expect(statuses).toEqual(['running', 'succeeded']);
  });

  it('ends a stream after its lifetime with a reconnection hint, and forgets it', async () => {
    const t = await harness({ maxStreamMs: 100 });
    const c = await client(t, true);
    await t.attached[0];
    // the response's last chunk: the stream ended (the socket itself may be kept alive)
    await waitFor("the response's last chunk", () => c.received().endsWith('0\r\n\r\n'), { intervalMs: 5 });
    expect(c.received()).toContain('retry: 1000\n\n');
    expect(t.hub.size).toBe(0);
    await t.bus.publish([event()]);
    expect(t.errors).toEqual([]);
  });

  it('close() unregisters every stream: events and heartbeats after it never write after end()', async () => {
    // the hub's timers (heartbeats, stream expiry) on a faked clock; sockets, and the test's own waits, run as they do
    jest.useFakeTimers({ doNotFake: ['hrtime', 'nextTick', 'performance', 'queueMicrotask', 'setImmediate', 'clearImmediate'] });
    const t = await harness({ heartbeatMs: 5 });
    await client(t); // stalled: its end() cannot complete, so 'close' does not come soon
    const res = t.responses[0]!;
    // Fill the socket until output queues in the process (but stays under the drop bound).
    await waitFor(
      'output queued in the process',
      async () => {
        await t.bus.publish([event(16 * 1024)]);
        return res.writableLength > 0;
      },
      { intervalMs: 1 },
    );
    expect(res.writableLength).toBeGreaterThan(0);
    expect(res.writableLength).toBeLessThan(MAX_BUFFERED_BYTES);

    t.hub.close();
    await t.bus.publish([event()]);
    // no timer of the hub is left to write: none fires however far the clock goes
    expect(jest.getTimerCount()).toBe(0);
    jest.advanceTimersByTime(60_000);
    // a write after end() is reported on the next tick: let those run
    await new Promise(setImmediate);
    expect(t.errors.map((e) => (e as NodeJS.ErrnoException).code)).toEqual([]);
    expect(t.hub.size).toBe(0);
    expect(res.writableEnded).toBe(true);
  });

  it('attach() of a client that already left returns at once and registers nothing', async () => {
    const t = await harness({ attachAfterClose: true });
    (await client(t)).socket.destroy();
    await waitFor('attach() to be called', () => t.attached.length > 0, { intervalMs: 5 });
    const outcome = await Promise.race([t.attached[0]!.then(() => 'returned'), delay(500).then(() => 'pending')]);
    expect(outcome).toBe('returned');
    expect(t.hub.size).toBe(0);
  });

  it('drops a client that stops reading once its backlog passes the bound', async () => {
    const t = await harness();
    await client(t);
    const res = t.responses[0]!;
    // At most 64 MiB offered: far beyond socket buffers plus the bound.
    let offered = 0;
    await waitFor(
      'the client dropped',
      async () => {
        if (++offered > 1024) throw new Error('64 MiB offered and the client is still attached');
        await t.bus.publish([event(64 * 1024)]);
        return t.hub.size === 0;
      },
      { timeoutMs: 30_000, intervalMs: 1 },
    );
    expect(t.hub.size).toBe(0);
    expect(res.destroyed).toBe(true);
    await t.attached[0]; // the stream's promise settles: the handler does not leak
  });
});

describe('JobEventsHub.admit', () => {
  it('refuses a token its eleventh open stream (429 too_many_streams); another token and a closed stream free a place', async () => {
    const t = await harness();
    const opened = [];
    for (let i = 0; i < MAX_STREAMS_PER_TOKEN; i++) {
      t.hub.admit(admin);
      opened.push(await client(t, true));
    }
    await waitFor(`${MAX_STREAMS_PER_TOKEN} streams attached`, () => t.hub.size >= MAX_STREAMS_PER_TOKEN, { intervalMs: 5 });
    expect(() => t.hub.admit(admin)).toThrow(expect.objectContaining({ kind: 'rate_limited', code: 'too_many_streams' }));
    // the cap is per token
    expect(() => t.hub.admit({ ...admin, token_id: 't-2' })).not.toThrow();
    // a stream that ends gives its place back
    opened[0]!.socket.destroy();
    await waitFor('the ended stream forgotten', () => t.hub.size <= MAX_STREAMS_PER_TOKEN - 1, { intervalMs: 5 });
    expect(() => t.hub.admit(admin)).not.toThrow();
  });
});

/** An administrator of another organisation, with a token of its own. */
const OTHER_ORG = '0190a0c8-0000-7000-8000-000000000002';
const tokenOf = (n: number, org = ORG) => ({ ...admin, org_id: org, token_id: `t-${org.slice(-1)}-${n}` });

describe('JobEventsHub caps beyond the token', () => {
  it('refuses an organisation its streams past the per-org cap (429 too_many_streams), whatever its tokens; other organisations still open', async () => {
    const t = await harness({ maxPerOrg: 3 });
    for (let i = 0; i < 3; i++) {
      t.hub.admit(tokenOf(i));
      await client(t, true, tokenOf(i));
    }
    await waitFor('3 streams attached', () => t.hub.size >= 3, { intervalMs: 5 });
    expect(() => t.hub.admit(tokenOf(9))).toThrow(expect.objectContaining({ kind: 'rate_limited', code: 'too_many_streams' }));
    expect(() => t.hub.admit(tokenOf(0, OTHER_ORG))).not.toThrow();
    // a stream that ends gives the organisation its place back
    t.clients[0]!.destroy();
    await waitFor('the ended stream forgotten', () => t.hub.size <= 2, { intervalMs: 5 });
    expect(() => t.hub.admit(tokenOf(9))).not.toThrow();
  });

  it('answers 503 past the gateway-wide cap', async () => {
    const t = await harness({ maxStreams: 2 });
    await client(t, true, tokenOf(1));
    await client(t, true, tokenOf(1, OTHER_ORG));
    await waitFor('2 streams attached', () => t.hub.size >= 2, { intervalMs: 5 });
    expect(() => t.hub.admit(tokenOf(2))).toThrow(expect.objectContaining({ kind: 'unavailable' }));
  });

  // Admission and attachment are apart by the request's rate-limit count: streams
  // admitted together must not all be attached past the cap.
  it('ends a stream at once, with a retry hint, when its cap filled between admission and attachment', async () => {
    const t = await harness({ maxPerOrg: 1 });
    t.hub.admit(tokenOf(1));
    t.hub.admit(tokenOf(2)); // both admitted while none is attached
    const first = await client(t, true, tokenOf(1));
    const second = await client(t, true, tokenOf(2));
    await waitFor("the second stream's last chunk", () => second.received().endsWith('0\r\n\r\n'), { intervalMs: 5 });
    expect(second.received()).toContain('retry: 5000\n\n');
    expect(second.received()).not.toContain('connected to background_jobs');
    expect(first.received()).toContain('connected to background_jobs');
    expect(t.hub.size).toBe(1);
  });

  it("offers an event only to its organisation's streams", async () => {
    const t = await harness();
    const mine = await client(t, true, tokenOf(1));
    const theirs = await client(t, true, tokenOf(1, OTHER_ORG));
    await t.bus.publish([event(64, OTHER_ORG)]);
    await waitFor('the event at the other organisation', () => theirs.received().includes('event: job.updated'), { intervalMs: 5 });
    await t.bus.publish([event()]);
    await waitFor('the event at my organisation', () => mine.received().includes('event: job.updated'), { intervalMs: 5 });
    expect(mine.received().match(/event: job.updated/g)).toHaveLength(1);
    expect(theirs.received().match(/event: job.updated/g)).toHaveLength(1);
  });
});
