import { sql, type SQL } from 'drizzle-orm';
import { Batcher } from './batcher.js';
import { deleteInBatches } from './retention.js';
import { requestScope } from './context.js';
import { PLANNED_PER_CALL, rows, sqlArray, type Database, type Tx } from './db.js';
import { violatedConstraint } from './constraint-errors.js';
import { DomainError } from './errors.js';
import type { Logger } from './logger.js';
import { metrics } from './metrics.js';

/**
 * The Idempotency-Key rules, kept where the write happens. The spec's rules are:
 * the same key (per organisation and token) with the same request within 24 hours
 * gives the first answer again, marked `Idempotent-Replay: true`; with another
 * request it is a 409 idempotency_key_conflict; the write is made once, however
 * many duplicates arrive together and whatever process dies in between.
 *
 * The owning service keeps a receipt of each keyed call that wrote: the first
 * write transaction of the call claims the key in that very transaction
 * (`Outbox.write`), with the request's hash (method, path and canonical body,
 * made by the gateway) and, where the write decides it, the call's answer; an
 * answer decided later is stored under the claim once the handler has it
 * (`GrpcServer`). So the key and the write commit or vanish together, and no
 * crash, of the gateway or of the service, can leave one without the other.
 *
 * A duplicate's own write then fails on the claim (a concurrent one waits for
 * the first transaction on the primary key, then fails) and rolls back all it
 * did, or its handler fails before writing (a delete finding no record); either
 * way `recover` gives the stored answer, which the gateway replays, or the 409
 * when the hash differs. A keyed request that wrote nothing (refused with a 4xx)
 * has no receipt here: the gateway keeps that outcome (its `refusals`), the
 * only thing it stores about keys. Receipts are scoped by the signed
 * organisation and token (the key travels unsigned beside them), and kept 24 hours.
 */

const RETENTION_HOURS = 24;
/** How long a retry waits for the answer of a claim that committed a moment ago. */
const ANSWER_WAIT_MS = 2_000;

export interface ReceiptKey {
  org_id: string;
  token_id: string;
  key: string;
  /** the keyed request's hash, when the gateway gave one */
  hash: string | null;
}

/** What a failed keyed call turns into once its receipt has been looked up: the first answer (a replay), or an error. */
export type Recovered = { answer: Buffer } | { error: DomainError } | undefined;

/** The receipt key of the call being served, if it is keyed and signed for an org and token. */
function keyOfCall(): ReceiptKey | undefined {
  const scope = requestScope.getStore();
  const caller = scope?.caller;
  if (!scope?.idempotency_key || !caller?.org_id || !caller.token_id) return undefined;
  return { org_id: caller.org_id, token_id: caller.token_id, key: scope.idempotency_key, hash: scope.request_hash ?? null };
}

/** The error code of an Idempotency-Key met with another request, or whose write's answer was lost. */
export const IDEMPOTENCY_KEY_CONFLICT = 'idempotency_key_conflict';

const conflict = (message: string) => DomainError.conflict(message, IDEMPOTENCY_KEY_CONFLICT);

/** The violation a second claim of a key raises (pg or PGlite, possibly wrapped by drizzle). */
const isTaken = (err: unknown): boolean => violatedConstraint(err, ['call_receipts_pkey']) === 'call_receipts_pkey';

export class Receipts {
  private readonly table;
  private readonly tableName: string;
  private readonly keeping = new Set<Promise<void>>();
  // answers are kept as base64 text: an array of them is one parameter on both
  // node-postgres and PGlite
  private readonly answers = new Batcher<{ k: ReceiptKey; answer: Buffer }>((items) => this.storeAnswers(items));

  constructor(
    private readonly db: Database,
    schema: string,
    private readonly log: Logger,
  ) {
    this.tableName = `${schema}.call_receipts`;
    this.table = sql.raw(this.tableName);
  }

  /**
   * The key a write about to begin claims: the first write of a keyed call does
   * (marked at once, so a second write the handler runs concurrently does not
   * claim the key against the first); settleClaim() says how it ended.
   */
  beginClaim(): ReceiptKey | undefined {
    const scope = requestScope.getStore();
    if (!scope || scope.receipt) return undefined;
    const k = keyOfCall();
    if (k) scope.receipt = 'claiming';
    return k;
  }

  /** After the claiming write: rolled back (unclaimed), committed, or committed with the answer. */
  settleClaim(outcome: 'rolled back' | 'claimed' | 'answered'): void {
    const scope = requestScope.getStore();
    if (scope) scope.receipt = outcome === 'rolled back' ? undefined : outcome;
  }

  /**
   * Claims the key in the write's transaction, with the call's answer when the
   * write decides it (then a process that dies right after the commit still
   * leaves the answer behind). A key claimed before fails the write.
   * `within`: the statement the claim's INSERT is made by, as a WITH clause of
   * another (Outbox.write: the outbox rows' INSERT, one statement fewer per keyed
   * write); alone by default.
   */
  async claim(tx: Tx, k: ReceiptKey, answer?: unknown, within: (claimInsert: SQL) => SQL = (c) => c): Promise<void> {
    const encode = requestScope.getStore()?.encode_answer;
    const kept = answer !== undefined && encode ? encode(answer).toString('base64') : null;
    try {
      await tx.execute(
        within(
          sql`insert into ${this.table} (org_id, token_id, key, request_hash, answer) values (${k.org_id}::uuid, ${k.token_id}, ${k.key}, ${k.hash}, ${kept})`,
        ),
      );
    } catch (err) {
      if (isTaken(err)) throw conflict('a request with this Idempotency-Key was already applied');
      throw err;
    }
  }

  /**
   * After the handler answered: keeps the answer to give a retry, if this call
   * claimed its key. The call is answered without waiting for it: a retry reaches
   * this service only after the gateway has given the key up as abandoned (15 s
   * at least), and one that comes early waits for the answer (recover). A process
   * that dies first leaves a claim without an answer, as if it had died before
   * answering.
   */
  keepAnswer(answer: unknown): void {
    const scope = requestScope.getStore();
    if (scope?.receipt !== 'claimed' || !scope.encode_answer) return;
    const k = keyOfCall()!;
    const kept = this.answers.add({ k, answer: scope.encode_answer(answer) }).catch((err: unknown) => {
      metrics().idempotencyStoreErrors.inc({ operation: 'receipt_keep' });
      this.log.warn({ err }, 'receipt answer not kept');
    });
    this.keeping.add(kept);
    void kept.finally(() => this.keeping.delete(kept));
  }

  /** Waits for the answers still being kept (before the database closes). */
  async flush(): Promise<void> {
    await Promise.all([...this.keeping]);
  }

  /**
   * After the handler failed. A call that claimed its key committed a write and
   * then failed: the claim is released, so a retry runs again as it would have
   * without receipts. Otherwise a receipt of the key means the failure is a
   * duplicate's: with the same request hash, its answer is the first call's;
   * with another, a conflict. A claim without an answer (the first call's
   * process died after committing) is a conflict the client must resolve by
   * looking the result up.
   */
  async recover(): Promise<Recovered> {
    const k = keyOfCall();
    if (!k) return undefined;
    const own = requestScope.getStore()?.receipt;
    if (own === 'claimed' || own === 'answered') {
      await this.db.orm.execute(sql`delete from ${this.table}
          where org_id = ${k.org_id}::uuid and token_id = ${k.token_id} and key = ${k.key}`);
      return undefined;
    }
    for (const until = Date.now() + ANSWER_WAIT_MS; ;) {
      const [found] = await rows<{ answer: string | null; request_hash: string | null }>(
        this.db.orm,
        sql`select answer, request_hash from ${this.table} where org_id = ${k.org_id}::uuid and token_id = ${k.token_id} and key = ${k.key}`,
      );
      if (!found) return undefined;
      // a receipt or a call without a hash (an older gateway) is judged by the key alone
      if (found.request_hash && k.hash && found.request_hash !== k.hash) {
        return { error: conflict('Idempotency-Key was already used with a different request') };
      }
      if (found.answer !== null) return { answer: Buffer.from(found.answer, 'base64') };
      if (Date.now() >= until) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    return {
      error: conflict(
        'a request with this Idempotency-Key was applied, but its answer was lost with the process that served it; look the result up before writing again',
      ),
    };
  }

  private async storeAnswers(items: { k: ReceiptKey; answer: Buffer }[]): Promise<void> {
    await this.db.orm.execute(sql`${PLANNED_PER_CALL}update ${this.table} r set answer = v.answer
        from unnest(${sqlArray(items.map((i) => i.k.org_id))}::uuid[], ${sqlArray(items.map((i) => i.k.token_id))}::text[],
                    ${sqlArray(items.map((i) => i.k.key))}::text[], ${sqlArray(items.map((i) => i.answer.toString('base64')))}::text[])
             as v(org_id, token_id, key, answer)
        where r.org_id = v.org_id and r.token_id = v.token_id and r.key = v.key`);
  }

  /** Forgets receipts past the gateway's retention of outcomes. */
  async prune(): Promise<number> {
    return deleteInBatches(this.db, this.tableName, sql`created_at < now() - (${RETENTION_HOURS} * interval '1 hour')`);
  }
}
