import { LRUCache } from 'lru-cache';
import type { Reply } from '@lab/http-api';
import { scopeKey, type IdempotencyScope } from './idempotency.js';

/** How long this replica replays a keyed write's answer itself; the owning service's receipt keeps it 24 hours. */
const ANSWERED_TTL_MS = 60 * 60_000;
/**
 * Memory for the answers kept (their bodies' bytes, plus ENTRY_OVERHEAD each):
 * about 2,000 answers of a record. Small on purpose: at 16 MiB the keyed POST
 * benchmark lost 3-5% (the retained answers, promoted and churned, cost the
 * gateway about one page fault per request); at 2 MiB it was as before. A
 * retry that finds its answer gone goes to the receipt.
 */
const ANSWERED_MAX_BYTES = 2 * 1024 * 1024;
/** An answer larger than this (a big ingest's) is not kept here: its retry goes to the receipt. */
const ANSWERED_MAX_ENTRY_BYTES = 64 * 1024;
/** What an entry costs beyond its body: key, hash, status, headers. */
const ENTRY_OVERHEAD = 512;

interface Answered {
  hash: string;
  reply: Reply;
}

/**
 * The successful answers of keyed writes this gateway replica gave, kept an hour in
 * memory, so that a retry of the same request reaching this replica is replayed
 * here, without the call, the write attempt it would make in the owning service
 * (rolled back on the receipt's key) and the receipt's read. Measured at 200
 * req/s: a replay through the service took 2.9 ms at p50 against 1.5 ms for a GET
 * of the same record.
 *
 * Not a second mechanism: the receipt in the owning service's transaction stays
 * the rule (the kit's receipts.ts), and holds the very answer kept here (the
 * first answer; a replay's answer is that answer again). A retry reaching another
 * replica, or this one after a restart, an hour, or an eviction, is answered from
 * the receipt as before. Only successes are kept: refusals are the
 * `KeyedRefusals`' (a 4xx wrote nothing), a 5xx is kept nowhere, and a request
 * with another payload under a kept key goes on to the service, whose receipt
 * answers the 409 (or, for a key first used on another service's route, runs, as
 * decided in decisions/022).
 */
export class AnsweredKeys {
  private readonly answers: LRUCache<string, Answered>;

  constructor(opts: { ttlMs?: number; maxBytes?: number; maxEntryBytes?: number; clock?: { now(): number } } = {}) {
    this.answers = new LRUCache<string, Answered>({
      ttl: opts.ttlMs ?? ANSWERED_TTL_MS,
      maxSize: opts.maxBytes ?? ANSWERED_MAX_BYTES,
      maxEntrySize: (opts.maxEntryBytes ?? ANSWERED_MAX_ENTRY_BYTES) + ENTRY_OVERHEAD,
      sizeCalculation: (a) => ENTRY_OVERHEAD + (a.reply.body === undefined ? 0 : Buffer.byteLength(a.reply.body)),
      // an hour from the answer, not from the last replay
      updateAgeOnGet: false,
      // the clock read at each look-up: its default 1 ms resolution arms a timer per read
      ttlResolution: 0,
      ...(opts.clock ? { perf: opts.clock } : {}),
    });
  }

  /** The replay of the key's kept answer, when it answered this very request. */
  replay(scope: IdempotencyScope, hash: string): Reply | undefined {
    const a = this.answers.get(scopeKey(scope));
    if (a?.hash !== hash) return undefined;
    return { ...a.reply, headers: { ...a.reply.headers, 'Idempotent-Replay': 'true' } };
  }

  /**
   * Keeps a keyed request's successful answer (a first answer, or the owning
   * service's replay of one). Streamed and failed answers are not kept; nor is
   * one too large (the cache leaves it out).
   */
  remember(scope: IdempotencyScope, hash: string, reply: Reply): void {
    if (reply.status < 200 || reply.status >= 300 || reply.stream) return;
    this.answers.set(scopeKey(scope), { hash, reply: { status: reply.status, body: reply.body, contentType: reply.contentType, headers: reply.headers } });
  }
}
