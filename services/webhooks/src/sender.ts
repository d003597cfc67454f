import http from 'node:http';
import https from 'node:https';
import { BlockedAddressError, pinnedLookup, resolveAllowed, withTimeout, type ResolvedTarget, type Resolver } from '@lab/kit';

export interface SendInput {
  url: string;
  body: Buffer;
  headers: Record<string, string>;
  /** deadline of the whole attempt, DNS lookup included */
  timeoutMs: number;
  allowPrivate: boolean;
  /** the DNS lookup behind the SSRF guard (default: the system resolver; tests inject one) */
  resolver?: Resolver;
}

export type SendOutcome =
  | { ok: true; status: number }
  /** `retry: false` for failures no retry can fix (a blocked address) */
  | { ok: false; status?: number; error: string; retry: boolean };

/** What is read of a receiver's answer before the socket is dropped. */
const MAX_RESPONSE_BYTES = 64 * 1024;

/**
 * Idle connections to receivers are kept and reused: a TCP (and TLS) handshake
 * per delivery cost more CPU than the delivery itself. Only sockets opened
 * through the SSRF guard's pinned lookup enter the pool, so a reused socket
 * leads to an address that was checked. Idle sockets are closed after 4 s, under
 * the common 5 s server keep-alive, and sooner when the receiver's Keep-Alive
 * header asks (Node honours the hint), so a request rarely meets a socket the
 * receiver is closing; when it does, it is sent once more on a new connection.
 */
const FREE_SOCKET_MS = 4_000;
const agents = {
  'http:': new http.Agent({ keepAlive: true, timeout: FREE_SOCKET_MS }),
  'https:': new https.Agent({ keepAlive: true, timeout: FREE_SOCKET_MS }),
};

/**
 * One POST to a receiver. The host is resolved and checked by the SSRF guard
 * and the connection goes to that checked address; redirects are never
 * followed (a 3xx is a failed attempt); the whole exchange has one deadline.
 */
export async function postOnce(input: SendInput): Promise<SendOutcome> {
  const url = new URL(input.url);
  // The deadline starts before the lookup: a tenant's nameserver that never
  // answers must not keep the attempt alive past its lease. The guard asks DNS
  // itself with its own timeout (kit dnsResolver), so a silent one holds no
  // threadpool thread either.
  const deadlineAt = Date.now() + input.timeoutMs;
  let target: ResolvedTarget;
  try {
    target = await withTimeout(resolveAllowed(url.hostname, input.allowPrivate, input.resolver), input.timeoutMs, `timeout after ${input.timeoutMs} ms`);
  } catch (err) {
    if (err instanceof BlockedAddressError) return { ok: false, error: `blocked_address: ${err.message}`, retry: false };
    return { ok: false, error: `dns: ${(err as Error).message}`, retry: true };
  }
  const https_ = url.protocol === 'https:';
  const mod = https_ ? https : http;
  const lookup = pinnedLookup(target);
  const headers = { ...input.headers, 'Content-Length': String(input.body.length) };
  return new Promise<SendOutcome>((resolve) => {
    let settled = false;
    let req: http.ClientRequest | undefined;
    const done = (o: SendOutcome) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(o);
    };
    const send = (pooled: boolean) => {
      let answered = false;
      req = mod.request(url, { method: 'POST', headers, lookup, agent: pooled ? agents[https_ ? 'https:' : 'http:'] : false }, (res) => {
        answered = true;
        const status = res.statusCode ?? 0;
        let seen = 0;
        res.on('data', (chunk: Buffer) => {
          seen += chunk.length;
          if (seen > MAX_RESPONSE_BYTES) res.destroy();
        });
        const finish = () => done(status >= 200 && status < 300 ? { ok: true, status } : { ok: false, status, error: `http ${status}`, retry: true });
        res.on('end', finish);
        res.on('close', finish);
        res.on('error', finish);
      });
      req.on('error', (err: NodeJS.ErrnoException) => {
        // an idle socket the receiver closed as it was reused: nothing was answered, send again on a new connection
        if (pooled && !answered && !settled && req?.reusedSocket && err.code === 'ECONNRESET') send(false);
        else done({ ok: false, error: err.message.slice(0, 500), retry: true });
      });
      req.end(input.body);
    };
    // What the lookup left of the deadline. `req?`: when mod.request throws
    // synchronously (an invalid header) there is no request, the promise has
    // already rejected, and the timer must not throw in its turn.
    const timer = setTimeout(
      () => {
        req?.destroy(new Error(`timeout after ${input.timeoutMs} ms`));
      },
      Math.max(0, deadlineAt - Date.now()),
    );
    send(true);
  });
}
