import { guardedGet, type Resolver } from '@lab/kit';
import { registration } from './client-metadata.js';

/**
 * Client ID metadata documents (draft-ietf-oauth-client-id-metadata-document,
 * MCP authorization 2025-11-25): a client whose client_id is an https URL is
 * described by the JSON document at that URL. The document is fetched through
 * the SSRF guard of webhook deliveries (kit guardedGet: public addresses only,
 * the checked address connected to, no redirects, bounded bytes and time), must
 * name the URL as its client_id, and gives the client's name and redirect URIs
 * under the same rules as a registration.
 *
 * Documents are cached per URL for the Cache-Control max-age they are served with,
 * kept within MIN_FRESH_MS..MAX_FRESH_MS (a client cannot make every sign-in a
 * fetch, nor pin a copy for days). When a refetch fails (host down, an error
 * status, a broken document) the last good copy is used for up to STALE_MS more,
 * and the next refetch is tried after RETRY_MS, so an outage of the client's host
 * does not sign its users out of new connections, nor get hammered by them.
 */
export interface ClientDocumentOptions {
  /** lets documents be fetched from loopback and private addresses (tests, local clients); never in production */
  allowPrivateNetworks?: boolean;
  /** an extra trusted CA (PEM), for tests serving documents with a self-signed certificate */
  ca?: string;
  /** deadline of one fetch (default 5 s) */
  timeoutMs?: number;
  resolver?: Resolver;
  /** the clock (tests) */
  now?: () => number;
}

/** A client as its document describes it. */
export interface ClientDocument {
  url: string;
  name: string;
  redirect_uris: string[];
  scopes: string[];
}

/** Why a URL client id cannot be used, for the error page. */
export class ClientDocumentError extends Error {
  override name = 'ClientDocumentError';
}

/** The draft recommends 5 KB; what a client needs fits well inside. */
const MAX_DOCUMENT_BYTES = 5 * 1024;
const MIN_FRESH_MS = 60_000;
const DEFAULT_FRESH_MS = 5 * 60_000;
const MAX_FRESH_MS = 24 * 60 * 60_000;
const STALE_MS = 24 * 60 * 60_000;
const RETRY_MS = 30_000;
/** URLs kept at most; the oldest entry goes first. Any public URL may be named, so the cache must not grow without bound. */
const MAX_ENTRIES = 1000;

interface Entry {
  doc: ClientDocument;
  freshUntil: number;
  keepUntil: number;
}

/**
 * Whether a client_id is meant as a metadata document URL, and if so whether it
 * is one (draft section 3: https, a path, no dot segments, fragment or
 * credentials). undefined: not a URL client id at all (a registered client's UUID).
 */
export function documentUrlProblem(clientId: string): string | undefined | null {
  if (!/^https?:\/\//i.test(clientId)) return undefined;
  if (clientId.length > 2000) return 'the client id URL is longer than 2000 characters';
  if (!URL.canParse(clientId)) return 'the client id is not a valid URL';
  const u = new URL(clientId);
  if (u.protocol !== 'https:') return 'a client id URL must be https';
  if (u.username || u.password) return 'a client id URL carries no credentials';
  if (clientId.includes('#')) return 'a client id URL has no fragment';
  if (u.pathname === '/' || u.pathname === '') return 'a client id URL has a path';
  // as sent, before the parser removes them: a URL with dot segments names another document than it reads as
  const path = clientId.slice(clientId.indexOf('/', 'https://'.length)).split(/[?#]/)[0]!;
  if (path.split('/').some((seg) => ['.', '..'].includes(seg.replace(/%2e/gi, '.')))) return 'a client id URL has no dot segments';
  return null;
}

/** max-age of a Cache-Control header, within the bounds; no-store and no-cache mean the shortest. */
function freshFor(cacheControl: string | string[] | undefined): number {
  const cc = (Array.isArray(cacheControl) ? cacheControl.join(',') : (cacheControl ?? '')).toLowerCase();
  if (/(^|,)\s*(no-store|no-cache)\s*(,|$)/.test(cc)) return MIN_FRESH_MS;
  const m = /(?:^|,)\s*max-age\s*=\s*"?(\d+)"?/.exec(cc);
  const ms = m ? Number(m[1]) * 1000 : DEFAULT_FRESH_MS;
  return Math.min(MAX_FRESH_MS, Math.max(MIN_FRESH_MS, ms));
}

export class ClientDocuments {
  private readonly entries = new Map<string, Entry>();
  private readonly inFlight = new Map<string, Promise<ClientDocument>>();
  private readonly now: () => number;

  constructor(private readonly opts: ClientDocumentOptions = {}) {
    this.now = opts.now ?? Date.now;
  }

  /**
   * The client of this URL: from the cache while fresh, else fetched (one fetch
   * per URL at a time; `beforeFetch` runs first and may refuse, e.g. a rate
   * limit), else the last good copy while it may be kept. A ClientDocumentError
   * when there is none.
   */
  async resolve(url: string, beforeFetch: () => Promise<void> = async () => undefined): Promise<ClientDocument> {
    const problem = documentUrlProblem(url);
    if (problem) throw new ClientDocumentError(problem);
    const entry = this.entries.get(url);
    const now = this.now();
    if (entry && entry.freshUntil > now) return entry.doc;
    let pending = this.inFlight.get(url);
    if (!pending) {
      pending = this.refetch(url, entry, beforeFetch).finally(() => this.inFlight.delete(url));
      this.inFlight.set(url, pending);
    }
    return pending;
  }

  private async refetch(url: string, entry: Entry | undefined, beforeFetch: () => Promise<void>): Promise<ClientDocument> {
    try {
      await beforeFetch();
    } catch (err) {
      // refused before any fetch (rate limit): a kept copy still serves
      if (entry && entry.keepUntil > this.now()) return entry.doc;
      throw err;
    }
    try {
      const { doc, freshMs } = await this.fetchDocument(url);
      this.remember(url, { doc, freshUntil: this.now() + freshMs, keepUntil: this.now() + freshMs + STALE_MS });
      return doc;
    } catch (err) {
      if (entry && entry.keepUntil > this.now()) {
        entry.freshUntil = this.now() + RETRY_MS;
        return entry.doc;
      }
      throw err;
    }
  }

  private remember(url: string, entry: Entry): void {
    this.entries.delete(url);
    if (this.entries.size >= MAX_ENTRIES) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(url, entry);
  }

  private async fetchDocument(url: string): Promise<{ doc: ClientDocument; freshMs: number }> {
    let answer;
    try {
      answer = await guardedGet(url, {
        timeoutMs: this.opts.timeoutMs ?? 5_000,
        maxBytes: MAX_DOCUMENT_BYTES,
        allowPrivate: this.opts.allowPrivateNetworks ?? false,
        ca: this.opts.ca,
        resolver: this.opts.resolver,
        headers: { accept: 'application/json' },
      });
    } catch (err) {
      throw new ClientDocumentError(`the client's metadata document could not be fetched: ${(err as Error).message}`);
    }
    if (answer.status !== 200) throw new ClientDocumentError(`the client's metadata document answered ${answer.status}`);
    let body: unknown;
    try {
      body = JSON.parse(answer.body.toString('utf8'));
    } catch {
      throw new ClientDocumentError("the client's metadata document is not JSON");
    }
    return { doc: documentClient(url, body), freshMs: freshFor(answer.headers['cache-control']) };
  }
}

/**
 * The client a fetched document describes. Its client_id must be the URL it was
 * fetched from, exactly (draft section 4.1: else any document could speak for any
 * URL); it holds no secret (a public client; the draft forbids shared secrets); the
 * rest follows the rules of a registration.
 */
function documentClient(url: string, body: unknown): ClientDocument {
  const m = body && typeof body === 'object' && !Array.isArray(body) ? (body as Record<string, unknown>) : undefined;
  if (!m) throw new ClientDocumentError("the client's metadata document is not a JSON object");
  if (m.client_id !== url) throw new ClientDocumentError("the client's metadata document does not name its own URL as client_id");
  if (m.client_secret !== undefined || m.client_secret_expires_at !== undefined)
    throw new ClientDocumentError("the client's metadata document holds a client secret; such clients have none");
  const r = registration(m);
  if ('error' in r) throw new ClientDocumentError(`the client's metadata document is refused (${r.error}): ${r.description}`);
  // a document without a name is known by its host, which at least is verified
  return { url, ...r, name: typeof m.client_name === 'string' ? r.name : new URL(url).host };
}
