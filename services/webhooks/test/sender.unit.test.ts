import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import type { Resolver } from '@lab/kit';
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
    // a receiver that answers 300 ms after the request arrives
    server = createServer((_req, res) => void delay(300).then(() => res.writeHead(204).end()));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const port = (server.address() as AddressInfo).port;
    const slow: Resolver = async () => {
      // deliberate wait: the subject, a lookup that takes 200 ms
      await delay(200);
      return [{ address: '127.0.0.1', family: 4 }];
    };
    // 400 ms for the attempt: after a 200 ms lookup, the request has at most 200 ms
    // left, less than the receiver takes (timers never fire early, so this holds on
    // a slow machine too); a deadline restarted after the lookup would get the answer
    const outcome = await within(postOnce(input({ url: `http://receiver.example.test:${port}/hook`, timeoutMs: 400, resolver: slow })), 3_000);
    expect(outcome).toMatchObject({ ok: false, retry: true, error: 'timeout after 400 ms' });
  });

  it('a request that cannot even be created fails without a later throw from the deadline timer', async () => {
    // an invalid header value makes http.request throw synchronously: there is no request to destroy
    const attempt = postOnce(input({ url: 'http://127.0.0.1:9/hook', headers: { 'X-Bad': 'a\nb' }, timeoutMs: 20 }));
    await expect(attempt).rejects.toMatchObject({ code: 'ERR_INVALID_CHAR' });
    // Past the deadline its timer has fired; with no request it used to throw, an
    // uncaught exception (which crashes a service, and which Jest reports as this test's failure).
    // deliberate wait: the subject is that the 20 ms deadline timer fires without a throw, an absence no condition marks
    await delay(100);
  });
});
