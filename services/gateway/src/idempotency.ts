import { createHash } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { Batcher, deleteInBatches, DomainError, IDEMPOTENCY_KEY_CONFLICT, isSaneIdempotencyKey, PLANNED_PER_CALL, sqlArray, type Database } from '@lab/kit';
import { bodyText, type Reply } from '@lab/http-api';

/** How long a refusal is replayed (the receipts' retention too). */
const RETENTION_MS = 24 * 60 * 60_000;

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
  response_status: number;
  response_body: string | null;
  content_type: string | null;
}

const conflict = (message: string) => DomainError.conflict(message, IDEMPOTENCY_KEY_CONFLICT);

/** One text per (organisation, token, key): the organisation's id in either case is one organisation. */
export const scopeKey = (s: IdempotencyScope) => JSON.stringify([s.org_id.toLowerCase(), s.token_id, s.key]);

/**
 * The gateway's share of the Idempotency-Key rules (stated in the kit's
 * receipts.ts): the outcomes of keyed requests that were refused with a 4xx and
 * so wrote nothing. A write's answer is kept by the owning service in the
 * write's own transaction, and given again from there; a refused request has no
 * write to keep it with, and may have been refused here before reaching a
 * service, so the gateway keeps it: a retry with the same request replays the
 * refusal, one with another request is a 409. So the first request of a key
 * costs the gateway one read (batched with the other requests of the moment)
 * and no write, unless it is refused.
 */
export class KeyedRefusals {
  /** Refusals being stored: settle() waits for them before the pool closes. */
  private readonly storing = new Set<Promise<void>>();
  private readonly lookups = new Batcher<IdempotencyScope, Row | undefined>((items) => this.read(items));

  constructor(private readonly db: Database) {}

  /**
   * The replay of the key's earlier refusal; undefined when the key has none.
   * Throws the 409 when the key was refused for another request.
   */
  async replay(scope: IdempotencyScope, hash: string): Promise<Reply | undefined> {
    const row = await this.lookups.add(scope);
    if (!row) return undefined;
    if (row.request_hash !== hash) throw conflict('Idempotency-Key was already used with a different request');
    return {
      status: row.response_status,
      body: row.response_body ?? undefined,
      contentType: row.content_type ?? undefined,
      headers: { 'Idempotent-Replay': 'true' },
    };
  }

  /**
   * Keeps a refusal without holding up the answer; settle() waits for it. Of
   * concurrent duplicates refused alike, the first stored is kept.
   */
  rememberInBackground(scope: IdempotencyScope, hash: string, reply: Reply, onError: (err: unknown) => void): void {
    const p = this.db.orm
      .execute(
        sql`insert into gateway.idempotency (org_id, token_id, key, request_hash, state, response_status, response_body, content_type)
            values (${scope.org_id}::uuid, ${scope.token_id}, ${scope.key}, ${hash}, 'done', ${reply.status}, ${bodyText(reply) ?? null}, ${reply.contentType ?? null})
            on conflict do nothing`,
      )
      .then(() => undefined, onError);
    this.storing.add(p);
    void p.finally(() => this.storing.delete(p));
  }

  /** Resolves once every refusal handed to rememberInBackground is stored (or failed). */
  async settle(): Promise<void> {
    await Promise.all([...this.storing]);
  }

  /** Deletes records past the retention window, in batches (kit deleteInBatches). */
  async purgeExpired(): Promise<number> {
    return deleteInBatches(this.db, 'gateway.idempotency', sql`created_at < now() - (${RETENTION_MS} * interval '1 millisecond')`);
  }

  /**
   * One statement for the lookups of a batch. Arrays through unnest: PostgreSQL
   * knows how many rows it yields and looks each up by the primary key. Rows of
   * the earlier design's claims ('in_progress', never completed) mean nothing.
   */
  private async read(items: IdempotencyScope[]): Promise<(Row | undefined)[]> {
    const col = (f: (i: IdempotencyScope) => unknown) => sqlArray(items.map(f));
    const found = await this.db.rows<Row & { org_id: string; token_id: string; key: string }>(
      sql`${PLANNED_PER_CALL}select i.org_id::text as org_id, i.token_id, i.key, i.request_hash, i.response_status, i.response_body, i.content_type
          from unnest(${col((i) => i.org_id)}::uuid[], ${col((i) => i.token_id)}::text[], ${col((i) => i.key)}::text[]) as v(org_id, token_id, key)
          join gateway.idempotency i on i.org_id = v.org_id and i.token_id = v.token_id and i.key = v.key
          where i.state = 'done' and i.created_at > now() - (${RETENTION_MS} * interval '1 millisecond')`,
    );
    const byKey = new Map(found.map((r) => [scopeKey(r), r]));
    return items.map((i) => byKey.get(scopeKey(i)));
  }
}
