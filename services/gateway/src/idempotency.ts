import { createHash } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { Batcher, deleteInBatches, DomainError, envInt, isSaneIdempotencyKey, PLANNED_PER_CALL, sqlArray, utcMicros, type Database } from '@lab/kit';
import type { Reply } from './replies.js';

/** How long a stored outcome is replayed. */
export const RETENTION_MS = 24 * 60 * 60_000;
/** How long a duplicate waits for the original to finish before answering 409. */
const WAIT_MS = 10_000;
/**
 * A duplicate reads the original's record again after 50 ms, then twice as long
 * each time up to 500 ms: most originals finish within the first reads, and a slow
 * one (a large lab order) is not read 200 times by each of its duplicates.
 */
const POLL_FIRST_MS = 50;
const POLL_MAX_MS = 500;
/**
 * An 'in_progress' row older than this belongs to a request whose gateway died
 * (idempotent routes end within the 10 s gRPC deadline); a later request with the
 * same key takes it over and runs. Waiting longer would not make the takeover
 * safer, only later: whether the dead request's write committed is unknown either
 * way (the outcome is stored by the gateway, after the owning service commits).
 */
const ABANDONED_MS = 60_000;
/**
 * LAB_IDEMPOTENCY_ABANDONED_MS, read by the gateway and the standalone process:
 * at least 15 s, longer than any idempotent request can run (10 s gRPC deadline).
 */
export const abandonedMsSetting = envInt(ABANDONED_MS, 15_000, 3_600_000);

/** JSON with object keys sorted at every level, so key order never changes the hash. */
export function canonicalJson(value: unknown): string {
  if (value === undefined) return 'null';
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map((v) => canonicalJson(v === undefined ? null : v)).join(',')}]`;
  const obj = value as Record<string, unknown>;
  const keys = Object.keys(obj)
    .filter((k) => obj[k] !== undefined)
    .sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(',')}}`;
}

/** SHA-256 hex of method, path and canonical body: what "the same request" means. */
export function requestHash(method: string, path: string, body: unknown): string {
  return createHash('sha256')
    .update(`${method.toUpperCase()}\n${path}\n${canonicalJson(body ?? null)}`)
    .digest('hex');
}

/** Checks the Idempotency-Key header; undefined when absent. */
export function parseIdempotencyKey(header: string | string[] | undefined): string | undefined {
  if (header === undefined) return undefined;
  const key = Array.isArray(header) ? header[0] : header;
  if (!isSaneIdempotencyKey(key)) {
    throw DomainError.invalid('Idempotency-Key must be 8 to 200 visible ASCII characters', {
      fields: [{ path: 'Idempotency-Key', message: 'must be 8 to 200 visible ASCII characters' }],
    });
  }
  return key;
}

export interface IdempotencyScope {
  org_id: string;
  token_id: string;
  key: string;
}

interface Row {
  request_hash: string;
  state: 'in_progress' | 'done';
  response_status: number | null;
  response_body: string | null;
  content_type: string | null;
  age_ms: number;
  /** created_at in UTC to the microsecond, as stored: names this claim of the key */
  created_at: string;
}

/**
 * Outcome of claiming a key: run the request (the claim is named by the time it
 * was made, which its outcome must match), or replay what it answered.
 */
export type Claim = { kind: 'run'; claimedAt: string } | { kind: 'replay'; reply: Reply };

const conflict = (message: string) => DomainError.conflict(message, 'idempotency_key_conflict');

/** One request's claim on its key. */
interface ClaimItem {
  scope: IdempotencyScope;
  hash: string;
}

/** One request's outcome to store, on its own claim. */
interface OutcomeItem {
  scope: IdempotencyScope;
  claimedAt: string;
  reply: Reply;
}

const scopeKey = (org_id: string, token_id: string, key: string) => JSON.stringify([org_id.toLowerCase(), token_id, key]);

/**
 * Idempotency records in the gateway's schema. A key is claimed by inserting an
 * 'in_progress' row with ON CONFLICT DO NOTHING, so of any number of concurrent
 * duplicates exactly one runs; the others wait for its outcome and replay it.
 *
 * Claims and outcomes of concurrent requests are written in batches (one
 * statement and one commit for all requests that arrive while the previous
 * batch is being written): under load, two commits per keyed write were the
 * largest share of the database's work on the write path.
 */
export class IdempotencyStore {
  /** Outcomes being stored: stop() waits for them before the pool closes. */
  private readonly storing = new Set<Promise<void>>();
  private readonly claims = new Batcher<ClaimItem, string | undefined>((items) => this.insertClaims(items));
  private readonly outcomes = new Batcher<OutcomeItem>((items) => this.storeOutcomes(items));

  constructor(
    private readonly db: Database,
    private readonly abandonedMs = ABANDONED_MS,
  ) {}

  /** Stores an outcome without holding up the answer; settle() waits for it. */
  completeInBackground(scope: IdempotencyScope, claimedAt: string, reply: Reply, onError: (err: unknown) => void): void {
    const p = this.complete(scope, claimedAt, reply).catch(onError);
    this.storing.add(p);
    void p.finally(() => this.storing.delete(p));
  }

  /** Resolves once every outcome handed to completeInBackground is stored (or failed). */
  async settle(): Promise<void> {
    await Promise.all([...this.storing]);
  }

  async claim(scope: IdempotencyScope, hash: string): Promise<Claim> {
    const deadline = Date.now() + WAIT_MS;
    let pollMs = POLL_FIRST_MS;
    for (;;) {
      const claimedAt = await this.claims.add({ scope, hash });
      if (claimedAt) return { kind: 'run', claimedAt };
      const row = await this.read(scope);
      if (!row) continue; // the holder failed and released the key: claim it again
      if (row.age_ms > RETENTION_MS || (row.state === 'in_progress' && row.age_ms > this.abandonedMs)) {
        // Only the row that was read is removed, and only while it is still
        // expired or abandoned: of duplicates that read it together, the first
        // removes it and claims the key afresh; the others remove nothing and
        // meet the new claim on the next turn, like any duplicate.
        await this.takeOver(scope, row.created_at);
        continue;
      }
      if (row.request_hash !== hash) {
        throw conflict('Idempotency-Key was already used with a different request');
      }
      if (row.state === 'done') return { kind: 'replay', reply: replayOf(row) };
      if (Date.now() >= deadline) {
        throw conflict('a request with this Idempotency-Key is still in progress; retry later');
      }
      await new Promise((r) => setTimeout(r, Math.min(pollMs, deadline - Date.now())));
      pollMs = Math.min(pollMs * 2, POLL_MAX_MS);
    }
  }

  /**
   * Stores the outcome on the request's own claim; a 5xx outcome releases the key
   * so a retry can run. Both touch the claim made at `claimedAt` only: a request
   * that outlived the abandonment window finds its key taken over, and must not
   * overwrite or delete the claim of the duplicate that took it.
   */
  async complete(scope: IdempotencyScope, claimedAt: string, reply: Reply): Promise<void> {
    if (reply.status >= 500) {
      await this.db.orm.execute(
        sql`delete from gateway.idempotency
            where org_id = ${scope.org_id}::uuid and token_id = ${scope.token_id} and key = ${scope.key}
              and created_at = ${claimedAt}::timestamptz`,
      );
      return;
    }
    await this.outcomes.add({ scope, claimedAt, reply });
  }

  /**
   * Inserts the claims of a batch; true for each claim that got its key. A key
   * given twice in one batch goes into the statement once: its first request
   * runs, the second finds the row like any later duplicate.
   */
  private async insertClaims(items: ClaimItem[]): Promise<(string | undefined)[]> {
    const keys = items.map((i) => scopeKey(i.scope.org_id, i.scope.token_id, i.scope.key));
    const first = new Map<string, number>();
    keys.forEach((k, n) => {
      if (!first.has(k)) first.set(k, n);
    });
    const rows = [...first.values()].map((n) => {
      const { scope, hash } = items[n]!;
      return { org_id: scope.org_id, token_id: scope.token_id, key: scope.key, request_hash: hash };
    });
    const inserted = await this.db.rows<{ org_id: string; token_id: string; key: string; created_at: string }>(
      sql`insert into gateway.idempotency (org_id, token_id, key, request_hash, state)
          select v.org_id, v.token_id, v.key, v.request_hash, 'in_progress'
          from json_to_recordset(${JSON.stringify(rows)}::json) as v(org_id uuid, token_id text, key text, request_hash text)
          on conflict do nothing returning org_id::text as org_id, token_id, key, ${utcMicros(sql`created_at`)} as created_at`,
    );
    const won = new Map(inserted.map((r) => [scopeKey(r.org_id, r.token_id, r.key), r.created_at]));
    return keys.map((k, n) => (first.get(k) === n ? won.get(k) : undefined));
  }

  /**
   * Arrays through unnest rather than a JSON recordset: PostgreSQL knows how many
   * rows unnest yields and looks each one up by the primary key, where it
   * estimated a recordset at 100 rows and scanned the whole table instead. Planned
   * per call: the table grows from empty, and a plan kept from then scans it.
   */
  private async storeOutcomes(items: OutcomeItem[]): Promise<void> {
    const col = <T>(f: (i: OutcomeItem) => T) => sqlArray(items.map(f));
    await this.db.orm.execute(
      sql`${PLANNED_PER_CALL}update gateway.idempotency i set state = 'done', response_status = v.status,
            response_body = v.body, content_type = v.content_type, updated_at = now()
          from unnest(${col((i) => i.scope.org_id)}::uuid[], ${col((i) => i.scope.token_id)}::text[],
                      ${col((i) => i.scope.key)}::text[], ${col((i) => i.claimedAt)}::timestamptz[], ${col((i) => i.reply.status)}::int[],
                      ${col((i) => i.reply.body ?? null)}::text[], ${col((i) => i.reply.contentType ?? null)}::text[])
            as v(org_id, token_id, key, claimed_at, status, body, content_type)
          where i.org_id = v.org_id and i.token_id = v.token_id and i.key = v.key and i.created_at = v.claimed_at`,
    );
  }

  /**
   * Deletes the key's record if it is still the one created at `seenCreatedAt`
   * and still expired or abandoned. An unconditional delete here let a duplicate
   * that read the old row late remove the claim another duplicate had just made
   * in its place, and run the request a second time beside it.
   */
  private async takeOver(scope: IdempotencyScope, seenCreatedAt: string): Promise<void> {
    await this.db.orm.execute(
      sql`delete from gateway.idempotency
          where org_id = ${scope.org_id}::uuid and token_id = ${scope.token_id} and key = ${scope.key}
            and created_at = ${seenCreatedAt}::timestamptz
            and (created_at < now() - (${RETENTION_MS} * interval '1 millisecond')
                 or (state = 'in_progress' and created_at < now() - (${this.abandonedMs} * interval '1 millisecond')))`,
    );
  }

  /** Deletes records past the retention window, in batches (kit deleteInBatches). */
  async purgeExpired(): Promise<number> {
    return deleteInBatches(this.db, 'gateway.idempotency', sql`created_at < now() - (${RETENTION_MS} * interval '1 millisecond')`);
  }

  private async read(scope: IdempotencyScope): Promise<Row | undefined> {
    const found = await this.db.rows<Row>(
      sql`select request_hash, state, response_status, response_body, content_type,
            (extract(epoch from (now() - created_at)) * 1000)::float8 as age_ms, ${utcMicros(sql`created_at`)} as created_at
          from gateway.idempotency
          where org_id = ${scope.org_id}::uuid and token_id = ${scope.token_id} and key = ${scope.key}`,
    );
    return found[0];
  }
}

function replayOf(row: Row): Reply {
  return {
    status: row.response_status ?? 200,
    body: row.response_body ?? undefined,
    contentType: row.content_type ?? undefined,
    headers: { 'Idempotent-Replay': 'true' },
  };
}
