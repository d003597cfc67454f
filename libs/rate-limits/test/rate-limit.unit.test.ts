import { once } from 'node:events';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { createLogger, DomainError } from '@lab/kit';
import { waitFor } from '@lab/testing/waits';
import { countedSignIn, RateLimiter, signInKey } from '../src/rate-limit';
import { expectBudgetEdgesAcrossAChange, expectOneBudgetAcrossLimits, expectWindowsToEnd } from './limiter-outcomes';

const log = createLogger('test', 'silent');

/** RESP arrays of bulk strings (what a client sends) parsed off the front of a buffer. */
function parseCommands(buf: Buffer): [string[][], Buffer] {
  const cmds: string[][] = [];
  let i = 0;
  while (buf[i] === 0x2a /* '*' */) {
    const end = buf.indexOf('\r\n', i);
    if (end < 0) break;
    const n = Number(buf.subarray(i + 1, end).toString());
    let j = end + 2;
    const args: string[] = [];
    for (let k = 0; k < n; k++) {
      const e = buf.indexOf('\r\n', j);
      if (e < 0) break;
      const len = Number(buf.subarray(j + 1, e).toString());
      if (buf.length < e + 2 + len + 2) break;
      args.push(buf.subarray(e + 2, e + 2 + len).toString());
      j = e + 2 + len + 2;
    }
    if (args.length < n) break;
    cmds.push(args);
    i = j;
  }
  return [cmds, buf.subarray(i)];
}

/**
 * A Redis that answers the connection handshake (so the client is 'ready' and
 * sends commands instead of refusing them while offline) and then goes silent:
 * the socket stays up, nothing more is ever answered.
 */
async function silentRedis(): Promise<{ url: string; ready: Promise<void>; unanswered: string[][]; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const unanswered: string[][] = [];
  let handshakeDone!: () => void;
  const ready = new Promise<void>((resolve) => (handshakeDone = resolve));
  const server: Server = createServer((s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    let buf = Buffer.alloc(0);
    s.on('data', (d: Buffer) => {
      let cmds: string[][];
      [cmds, buf] = parseCommands(Buffer.concat([buf, d]));
      for (const c of cmds) {
        const name = c[0]!.toLowerCase();
        // RESP3 refused: the client falls back to RESP2 and carries on
        if (name === 'hello') s.write("-ERR unknown command 'hello'\r\n");
        else if (name === 'client') s.write('+OK\r\n');
        else if (name === 'info') {
          const info = '# Server\r\nredis_version:7.2.0\r\nloading:0\r\n';
          s.write(`$${Buffer.byteLength(info)}\r\n${info}\r\n`);
          handshakeDone();
        } else unanswered.push(c);
      }
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `redis://127.0.0.1:${(server.address() as AddressInfo).port}`,
    ready,
    unanswered,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise((r) => server.close(r));
    },
  };
}

it('fails open, well before 2 s, when a connected Redis stops answering', async () => {
  const redis = await silentRedis();
  const limiter = new RateLimiter(log, redis.url);
  try {
    await redis.ready;
    // the INFO answer read: the client is ready (before that it refuses commands at once)
    const client = (limiter as unknown as { redis: { status: string } }).redis;
    await waitFor('the Redis client ready', () => client.status === 'ready', { timeoutMs: 2_000, intervalMs: 10 });
    const outcome = await Promise.race([
      limiter.consume('token-1', { per_minute: 5, per_hour: 100 }).then((state) => state),
      delay(2_000, undefined, { ref: false }).then(() => 'still waiting after 2 s' as const),
    ]);
    expect(outcome).toEqual({ limit: 5, remaining: 5 });
    // the count did go out to the silent server (not refused locally as offline)
    expect(redis.unanswered.length).toBeGreaterThan(0);
  } finally {
    await Promise.race([limiter.close(), delay(1_000, undefined, { ref: false })]);
    await redis.close();
  }
});

describe('countedSignIn', () => {
  const attempts = async (limiter: RateLimiter, email: string, n: number, answer: () => Promise<never>) => {
    const out: string[] = [];
    for (let i = 0; i < n; i++)
      out.push(
        await countedSignIn(limiter, { email, address: '192.0.2.1' }, answer).then(
          () => 'ok',
          (e: DomainError) => e.kind,
        ),
      );
    return out;
  };

  it('gives back the count of an attempt identity was too busy to check, and only that one', async () => {
    const limiter = new RateLimiter(log);
    try {
      // 15 busy answers in a row: none counts, so no 429
      expect(await attempts(limiter, 'Busy@Example.org', 15, () => Promise.reject(DomainError.unavailable('busy')))).toEqual(Array(15).fill('unavailable'));
      // wrong passwords count: the eleventh within the minute is refused before identity
      const wrong = await attempts(limiter, 'busy@example.org ', 11, () => Promise.reject(DomainError.invalid('invalid_grant')));
      expect(wrong).toEqual([...Array(10).fill('invalid'), 'rate_limited']);
    } finally {
      await limiter.close();
    }
  });

  it('gives no credit into a window that began after the count', async () => {
    const limiter = new RateLimiter(log);
    try {
      // as if the window ended between the count and the refund: nothing to give back
      await limiter.refund(signInKey('late@example.org'));
      const wrong = await attempts(limiter, 'late@example.org', 11, () => Promise.reject(DomainError.invalid('invalid_grant')));
      expect(wrong).toEqual([...Array(10).fill('invalid'), 'rate_limited']);
    } finally {
      await limiter.close();
    }
  });
});

describe('one budget per token', () => {
  // a personal access token acting in two organisations whose limits differ had a budget in each
  // (the same in Redis: rate-limit-redis.int.test.ts, where a Redis is there)
  it('is counted once whatever limit a request is under (in memory)', async () => {
    const limiter = new RateLimiter(log);
    const token = `pat-${Math.random()}`;
    try {
      await limiter.ready();
      await expectOneBudgetAcrossLimits(limiter, token);
    } finally {
      await limiter.close();
    }
  });

  // the fifth request of an hour limited to 5 was refused after a change (a request
  // before it counted), and the headers had said 995 were left
  it('tells at each edge of both windows what the next request gets, before and after a change (in memory)', async () => {
    const limiter = new RateLimiter(log);
    try {
      await expectBudgetEdgesAcrossAChange(limiter, `t-${Math.random()}`);
    } finally {
      await limiter.close();
    }
  });

  it('keeps the hour when the minute ends, and starts both when the hour ends (in memory)', async () => {
    // the in-memory windows end by Date.now(): only the date is faked, so the
    // limiter's own turns (setImmediate) and its stores' timers run as they do
    jest.useFakeTimers({
      doNotFake: [
        'hrtime',
        'nextTick',
        'performance',
        'queueMicrotask',
        'setImmediate',
        'clearImmediate',
        'setInterval',
        'clearInterval',
        'setTimeout',
        'clearTimeout',
      ],
    });
    const limiter = new RateLimiter(log);
    try {
      await expectWindowsToEnd(limiter, `t-${Math.random()}`, (window) => {
        jest.setSystemTime(Date.now() + (window === 'minute' ? 60_000 : 3_600_000));
        return Promise.resolve();
      });
    } finally {
      jest.useRealTimers();
      await limiter.close();
    }
  });

  it('reports what is left of the limit of the request', async () => {
    const limiter = new RateLimiter(log);
    try {
      expect(await limiter.consume('t', { per_minute: 5, per_hour: 100 })).toEqual({ limit: 5, remaining: 4 });
      expect(await limiter.consume('t', { per_minute: 50, per_hour: 100 })).toEqual({ limit: 50, remaining: 48 });
      expect(await limiter.consume('other', { per_minute: 0, per_hour: 0 })).toEqual({ limit: 120, remaining: 119 });
    } finally {
      await limiter.close();
    }
  });
});
