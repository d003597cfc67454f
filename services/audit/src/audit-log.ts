import { sql } from 'drizzle-orm';
import { auditRecordFromRow, type audit } from '@lab/contracts';
import { z } from 'zod';
import { cutByBytes, isUuid, keysetPage, parseWith, utcMicros, type AuditRecordData, type BusMessage, type Database, type Executor } from '@lab/kit';

const iso = z.string().refine((v) => !Number.isNaN(Date.parse(v)), 'must be an ISO 8601 date-time');

const listQuery = z
  .object({
    limit: z.number().int().min(1).max(1000).default(100),
    since_created_at: iso.optional(),
    since_id: z.string().refine(isUuid, 'must be a UUID').optional(),
    from: iso.optional(),
    to: iso.optional(),
  })
  .refine((q) => (q.since_created_at === undefined) === (q.since_id === undefined), {
    error: 'since_created_at and since_id go together',
    path: ['since_id'],
  });
export type ListQuery = z.infer<typeof listQuery>;

/**
 * Stores audit records, many in one statement (one parameter: a JSON array, so
 * the statement text is the same whatever the count, and stays prepared); a
 * duplicate delivery changes nothing. The insert trigger chains each record to
 * its organisation's previous one (migration 002) under a lock on the chain's
 * head; rows go in ordered by organisation, so two batches running at once lock
 * heads in the same order and cannot deadlock.
 */
export async function storeRecords(exec: Executor, msgs: BusMessage<AuditRecordData>[]): Promise<void> {
  // jsonb_to_recordset takes the columns it names and reads a missing key as null
  const rows = msgs.map((msg) => ({ ...msg.data, id: msg.id, org_id: msg.org_id, occurred_at: msg.occurred_at }));
  await exec.execute(sql`
    insert into audit.records (id, org_id, occurred_at, service, action, resource, record_id,
      actor_user_id, actor_token_id, token_kind, changed_fields, before, after, request_id, reason, meaning)
    select id, org_id, occurred_at, service, action, resource, record_id,
      actor_user_id, actor_token_id, token_kind, coalesce(changed_fields, '{}'), before, after, request_id, reason, meaning
    from jsonb_to_recordset(${JSON.stringify(rows)}::jsonb) as x(id uuid, org_id uuid, occurred_at timestamptz,
      service text, action text, resource text, record_id text, actor_user_id uuid, actor_token_id uuid,
      token_kind text, changed_fields text[], before jsonb, after jsonb, request_id text, reason text, meaning text)
    order by org_id nulls first, id
    on conflict (id) do nothing`);
}

export interface AuditPage {
  records: audit.AuditRecord[];
  count: number;
  next?: { since_created_at: string; since_id: string };
}

/**
 * One page of an organisation's audit log, oldest first, keyset-paged on
 * (created_at, id): the index serves every page in the same time, and a page
 * boundary can neither skip nor repeat a row.
 */
export async function listRecords(db: Database, orgId: string, q: ListQuery): Promise<AuditPage> {
  const conds = [sql`org_id = ${orgId}::uuid`];
  if (q.since_created_at && q.since_id) {
    conds.push(sql`(created_at, id) > (${q.since_created_at}::timestamptz, ${q.since_id}::uuid)`);
  }
  if (q.from) conds.push(sql`created_at >= ${q.from}::timestamptz`);
  if (q.to) conds.push(sql`created_at <= ${q.to}::timestamptz`);
  // The cursor column must not be aliased `created_at`: ORDER BY resolves a bare
  // name to an output column first, so it would sort on the to_char text, which
  // no index serves (a Sort over every row of the org, seconds at 1M rows). The
  // ORDER BY is qualified as well so a future alias cannot shadow it again.
  // The page is cut by bytes as well as rows (kit cutByBytes, as record lists):
  // audit records carry whole records before and after, so 1,000 of them can
  // exceed what one answer may carry; kit keysetPage says whether the cut (or the
  // row read past the limit) leaves more to come.
  const page = await db.rows<{ id: string; cursor_created_at: string; json: string; rows_in_reach: number }>(
    cutByBytes(
      sql`select id, created_at, ${utcMicros(sql`created_at`)} as cursor_created_at,
            json_build_object(
              'id', id,
              'created_at', ${utcMicros(sql`created_at`)},
              'occurred_at', ${utcMicros(sql`occurred_at`)},
              'service', service, 'action', action, 'resource', resource, 'record_id', record_id,
              'actor_user_id', actor_user_id, 'actor_token_id', actor_token_id, 'token_kind', token_kind,
              'changed_fields', changed_fields, 'before', before, 'after', after, 'request_id', request_id,
              'reason', reason, 'meaning', meaning, 'seq', seq, 'prev_hash', prev_hash, 'hash', hash
            )::text as json
          from audit.records
          where ${sql.join(conds, sql` and `)}
          order by records.created_at, records.id
          limit ${q.limit + 1}`,
      sql`created_at, id`,
      { rowsInReach: true },
    ),
  );
  const { shown, more } = keysetPage(page, q.limit);
  const last = shown.at(-1);
  return {
    records: shown.map((r) => auditRecordFromRow(JSON.parse(r.json) as Record<string, unknown>)),
    count: shown.length,
    next: more && last ? { since_created_at: last.cursor_created_at, since_id: last.id } : undefined,
  };
}

export function parseListRequest(req: { limit: number; since_created_at?: string; since_id?: string; from?: string; to?: string }): ListQuery {
  return parseWith(listQuery, { ...req, limit: req.limit || undefined }, 'invalid audit query');
}
