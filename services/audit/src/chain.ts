import { sql } from 'drizzle-orm';
import type { Database } from '@lab/kit';

/** The key of the chain of entries without an organisation (users, OAuth clients, sign-in sessions). */
export const NIL_UUID = '00000000-0000-0000-0000-000000000000';

/** The hash an organisation's chain starts from (the head of an empty chain). */
const GENESIS_HASH = '0'.repeat(64);

/** What is wrong at the first entry that does not check out. */
type ChainProblem =
  /** the entry's content no longer gives its hash: it was edited */
  | 'hash_mismatch'
  /** the entry does not link to the one before it: one was removed or moved */
  | 'prev_hash_mismatch'
  /** a sequence number is missing: an entry was removed */
  | 'sequence_gap'
  /** the chain stops before its recorded head: its last entries were removed */
  | 'head_mismatch';

export type ChainReport =
  | { ok: true; entries: number; head_hash: string | null }
  | {
      ok: false;
      /** entries checked and found sound before the broken one */
      entries: number;
      /** the entry found where the chain breaks (id null: past the last entry), and for a gap the number expected there */
      broken: { seq: number; id: string | null; problem: ChainProblem; expected_seq?: number };
    };

interface ChainRow {
  id: string;
  seq: string;
  prev_hash: string;
  hash: string;
  computed: string;
}

/** Rows per page: the walk holds one page in memory, whatever the chain's length. */
const PAGE = 5000;

/**
 * Walks one organisation's chain (null: the entries of no organisation) in
 * sequence order, a page at a time, recomputing each entry's hash in PostgreSQL
 * with the function that made it (audit.entry_hash), and checks that every entry
 * follows the one before it (seq + 1, prev_hash = its hash) and that the last
 * one is the recorded head. The first entry that fails is named.
 */
export async function verifyChain(db: Database, orgId: string | null): Promise<ChainReport> {
  const org = orgId === null ? sql`r.org_id is null` : sql`r.org_id = ${orgId}::uuid`;
  let seq = 0;
  let prev = GENESIS_HASH;
  for (;;) {
    const page = await db.rows<ChainRow>(
      sql`select r.id, r.seq::text as seq, r.prev_hash, r.hash, audit.entry_hash(r) as computed
          from audit.records r where ${org} and r.seq > ${seq}
          order by r.org_id, r.seq limit ${PAGE}`,
    );
    for (const row of page) {
      const n = Number(row.seq);
      const problem: ChainProblem | null =
        n !== seq + 1 ? 'sequence_gap' : row.prev_hash !== prev ? 'prev_hash_mismatch' : row.computed !== row.hash ? 'hash_mismatch' : null;
      if (problem) {
        const broken = { seq: n, id: row.id, problem, ...(problem === 'sequence_gap' ? { expected_seq: seq + 1 } : {}) };
        return { ok: false, entries: seq, broken };
      }
      seq = n;
      prev = row.hash;
    }
    if (page.length < PAGE) break;
  }
  const chain = orgId ?? NIL_UUID;
  const [head] = await db.rows<{ seq: string; hash: string }>(sql`select seq::text as seq, hash from audit.chain_heads where chain_org = ${chain}::uuid`);
  // entries written after the walk began are past its end but within the head: a
  // later seq is not a break, only a head the walk cannot reach is
  if (head && Number(head.seq) > seq) {
    const [beyond] = await db.rows<{ n: number }>(sql`select count(*)::int as n from audit.records r where ${org} and r.seq > ${seq}`);
    if (!beyond?.n) return { ok: false, entries: seq, broken: { seq: Number(head.seq), id: null, problem: 'head_mismatch', expected_seq: seq + 1 } };
  }
  if (head && Number(head.seq) === seq && head.hash !== prev) {
    return { ok: false, entries: seq, broken: { seq, id: null, problem: 'head_mismatch' } };
  }
  return { ok: true, entries: seq, head_hash: seq ? prev : null };
}
