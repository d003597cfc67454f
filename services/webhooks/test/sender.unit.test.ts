import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import type { Resolver } from '@lab/kit';
import { waitFor } from '@lab/testing/waits';
import { postOnce, type SendInput } from '../src/sender';

const body = Buffer.from('{}');
const input = (over: Partial<SendInput>): SendInput => ({
  url: 'http://receiver.example.test/hook',
  body,
  headers: { 'Content-Type': 'application/json' },
  timeoutMs: 100,
  allowPrivate: true,
  ...over,
});
/** What the attempt came to, or 'pending' when it has not settled by then. */
const within = <T>(p: Promise<T>, ms: number) => Promise.race([p, delay(ms, 'pending' as const, { ref: false })]);

let server: Server | undefined;
afterEach(async () => {
  server?.closeAllConnections();
  if (server) await new Promise((r) => server!.close(r));
  server = undefined;
});

describe('postOnce deadline', () => {
  it('covers the DNS lookup: a nameserver that never answers fails the attempt at the deadline', async () => {
    const neverAnswers: Resolver = () => new Promise(() => undefined);
    const outcome = await within(postOnce(input({ resolver: neverAnswers })), 1_000);
    expect(outcome).toEqual({ ok: false, error: 'dns: timeout after 100 ms', retry: true });
  });

  it('is one deadline: a slow lookup leaves the request only what remains of it', async () => {
    // a receiver that never answers: only the attempt's deadline ends it
    const arrived = new Promise<void>((resolve) => {
      server = createServer(() => resolve());
    });
    server!.listen(0, '127.0.0.1');
    await once(server!, 'listening');
    const port = (server!.address() as AddressInfo).port;
    // the attempt's clock and deadline timers are faked (sockets and the test's own waits are not),
    // so the lookup takes 200 ms of it exactly, however slow the machine
    jest.useFakeTimers({ doNotFake: ['hrtime', 'nextTick', 'performance', 'queueMicrotask', 'setImmediate', 'clearImmediate'] });
    try {
      let answerLookup: ((addresses: { address: string; family: number }[]) => void) | undefined;
      const slow: Resolver = () => new Promise((resolve) => (answerLookup = resolve));
      const attempt = postOnce(input({ url: `http://receiver.example.test:${port}/hook`, timeoutMs: 400, resolver: slow }));
      await waitFor('the lookup to be asked', () => answerLookup !== undefined);
      jest.advanceTimersByTime(200);
      answerLookup!([{ address: '127.0.0.1', family: 4 }]);
      await arrived;
      // 400 ms for the attempt: 200 went on the lookup, so 200 more end it; a
      // deadline restarted after the lookup would leave it pending
      jest.advanceTimersByTime(200);
      expect(await within(attempt, 3_000)).toMatchObject({ ok: false, retry: true, error: 'timeout after 400 ms' });
    } finally {
      jest.useRealTimers();
    }
  });

  it('a request that cannot even be created fails without a later throw from the deadline timer', async () => {
    jest.useFakeTimers({ doNotFake: ['hrtime', 'nextTick', 'performance', 'queueMicrotask', 'setImmediate', 'clearImmediate'] });
    try {
      // an invalid header value makes http.request throw synchronously: there is no request to destroy
      const attempt = postOnce(input({ url: 'http://127.0.0.1:9/hook', headers: { 'X-Bad': 'a\nb' }, timeoutMs: 20 }));
      await expect(attempt).rejects.toMatchObject({ code: 'ERR_INVALID_CHAR' });
      // The deadline timer is still set. With no request it used to throw when it
      // fired, an uncaught exception that crashes a service; run it now, and a throw
      // comes out of this call.
      expect(jest.getTimerCount()).toBe(1);
      expect(() => jest.runOnlyPendingTimers()).not.toThrow();
      expect(jest.getTimerCount()).toBe(0);
    } finally {
      jest.useRealTimers();
    }
  });
});
