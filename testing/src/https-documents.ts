import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { generate } from 'selfsigned';

/**
 * An HTTPS server on the loopback address that serves documents a test sets
 * (an OAuth client's metadata document), with a certificate of its own for
 * `localhost` and 127.0.0.1. The code under test trusts it only through the CA
 * it is given (`ca`, the certificate itself), never by turning verification off;
 * and reaches it only where private addresses are allowed.
 */
export interface ServedDocument {
  status?: number;
  body: unknown;
  headers?: Record<string, string>;
}

export interface HttpsDocuments {
  /** https://localhost:<port><path> */
  url(path: string): string;
  /** the PEM certificate to trust */
  ca: string;
  set(path: string, doc: ServedDocument): void;
  /** requests seen per path */
  hits(path: string): number;
  stop(): Promise<void>;
}

export async function startHttpsDocuments(): Promise<HttpsDocuments> {
  const pems = await generate([{ name: 'commonName', value: 'localhost' }], {
    keyType: 'ec',
    algorithm: 'sha256',
    extensions: [
      { name: 'basicConstraints', cA: true },
      {
        name: 'subjectAltName',
        altNames: [
          { type: 2, value: 'localhost' },
          { type: 7, ip: '127.0.0.1' },
        ],
      },
    ],
  });
  const docs = new Map<string, ServedDocument>();
  const seen = new Map<string, number>();
  const server: Server = createServer({ key: pems.private, cert: pems.cert }, (req, res) => {
    const path = (req.url ?? '/').split('?')[0]!;
    seen.set(path, (seen.get(path) ?? 0) + 1);
    const doc = docs.get(path);
    if (!doc) {
      res.writeHead(404).end();
      return;
    }
    const body = typeof doc.body === 'string' ? doc.body : JSON.stringify(doc.body);
    res.writeHead(doc.status ?? 200, { 'content-type': 'application/json', ...doc.headers }).end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: (path) => `https://localhost:${port}${path}`,
    ca: pems.cert,
    set: (path, doc) => docs.set(path, doc),
    hits: (path) => seen.get(path) ?? 0,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
