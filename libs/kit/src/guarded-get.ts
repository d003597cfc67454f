import https from 'node:https';
import { rootCertificates } from 'node:tls';
import { resolveAllowed, pinnedLookup, type Resolver } from './net-guard.js';
import { withTimeout } from './waits.js';

/**
 * A GET of a document at a URL someone else chose (an OAuth client's metadata
 * document), through the same SSRF guard as webhook deliveries: the host is
 * resolved and checked (no loopback, private, link-local or metadata address
 * unless `allowPrivate`), the connection goes to that checked address, no
 * redirect is followed, and the answer is bounded in bytes and time. HTTPS only:
 * such a document is trusted for what it says, so it must come from its host.
 */
export interface GuardedGetOptions {
  /** deadline of the whole fetch, DNS lookup included */
  timeoutMs: number;
  /** bytes of body read at most; more fails the fetch */
  maxBytes: number;
  allowPrivate: boolean;
  /** extra trusted CA certificates (PEM), on top of the system's; for tests with a self-signed receiver */
  ca?: string;
  /** the DNS lookup behind the guard (default: the system resolver) */
  resolver?: Resolver;
  headers?: Record<string, string>;
}

export interface GuardedGetAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

/** Why a guarded fetch failed, in words fit for an error page (no internal detail beyond the host). */
export class GuardedGetError extends Error {
  override name = 'GuardedGetError';
}

export async function guardedGet(url: string, opts: GuardedGetOptions): Promise<GuardedGetAnswer> {
  const u = new URL(url);
  if (u.protocol !== 'https:') throw new GuardedGetError('only https URLs are fetched');
  const deadlineAt = Date.now() + opts.timeoutMs;
  const target = await withTimeout(resolveAllowed(u.hostname, opts.allowPrivate, opts.resolver), opts.timeoutMs, `no address for ${u.hostname} in time`);
  // an extra CA is added to the system's list, not put in its place
  const ca = opts.ca ? [...rootCertificates, opts.ca] : undefined;
  return new Promise<GuardedGetAnswer>((resolve, reject) => {
    const req = https.request(
      u,
      {
        method: 'GET',
        headers: opts.headers,
        lookup: pinnedLookup(target),
        agent: false,
        ...(ca ? { ca } : {}),
        timeout: Math.max(1, deadlineAt - Date.now()),
      },
      (res) => {
        const chunks: Buffer[] = [];
        let seen = 0;
        res.on('data', (chunk: Buffer) => {
          seen += chunk.length;
          if (seen > opts.maxBytes) {
            res.destroy();
            reject(new GuardedGetError(`the document is larger than ${opts.maxBytes} bytes`));
            return;
          }
          chunks.push(chunk);
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
        res.on('error', (err) => reject(new GuardedGetError(err.message)));
      },
    );
    const timer = setTimeout(() => req.destroy(new GuardedGetError(`no answer within ${opts.timeoutMs} ms`)), Math.max(1, deadlineAt - Date.now()));
    req.on('close', () => clearTimeout(timer));
    req.on('timeout', () => req.destroy(new GuardedGetError(`no answer within ${opts.timeoutMs} ms`)));
    req.on('error', (err) => reject(err instanceof GuardedGetError ? err : new GuardedGetError(err.message)));
    req.end();
  });
}
