// Written by hand: how audit entries and chain reports (lab.audit.v1) map to and
// from the JSON the public API has always answered. The audit service builds the
// messages from the rows PostgreSQL rendered (json_build_object, times as UTC text
// with six digits of fraction and "Z"); the gateway and the export jobs write them
// back as that JSON.
import { ChainProblem, type AuditRecord, type VerifyChainResponse } from './lab/audit/v1/audit.js';
import { jsonArray, type JsonText } from './json-text.js';
import { enumWords, messageFromRow, messageShape, utcMicrosText, type RecordObject } from './record-json.js';

const AUDIT = messageShape(['created_at', 'occurred_at']);
const PROBLEM = enumWords<ChainProblem>(ChainProblem, 'CHAIN_PROBLEM_');

/** The words the API writes for a chain's problem. */
export type ChainProblemWord = 'hash_mismatch' | 'prev_hash_mismatch' | 'sequence_gap' | 'head_mismatch';

/** An entry as the list query rendered it (parsed): nulls left out, times as Timestamps, before and after as they are. */
export const auditRecordFromRow = (row: RecordObject): AuditRecord => messageFromRow(AUDIT, row) as unknown as AuditRecord;

/** An entry as the object clients see, fields in the order the API has always written them. */
export function auditRecordObject(r: AuditRecord): RecordObject {
  return {
    id: r.id,
    created_at: r.created_at ? utcMicrosText(r.created_at) : null,
    occurred_at: r.occurred_at ? utcMicrosText(r.occurred_at) : null,
    service: r.service,
    action: r.action,
    resource: r.resource,
    record_id: r.record_id ?? null,
    actor_user_id: r.actor_user_id ?? null,
    actor_token_id: r.actor_token_id ?? null,
    token_kind: r.token_kind ?? null,
    changed_fields: r.changed_fields,
    before: r.before ?? null,
    after: r.after ?? null,
    request_id: r.request_id ?? null,
    reason: r.reason ?? null,
    meaning: r.meaning ?? null,
    seq: r.seq ?? null,
    prev_hash: r.prev_hash ?? null,
    hash: r.hash ?? null,
  };
}

/**
 * An entry as the JSON text clients have always been answered. Before and after
 * are written by JSON.stringify: the spaces jsonb's text had after ':' and ','
 * are gone, the content is the same.
 */
export const auditRecordJson = (r: AuditRecord): string => JSON.stringify(auditRecordObject(r));

/** Entries as a JSON array text (a page's data). */
export const auditRecordsJson = (list: AuditRecord[]): JsonText => jsonArray(list, auditRecordJson);

/** What the audit service's chain walk reports, as plain data. */
export type ChainReportData =
  | { ok: true; entries: number; head_hash: string | null }
  | { ok: false; entries: number; broken: { seq: number; id: string | null; problem: ChainProblemWord; expected_seq?: number } };

/** A chain report as the message. */
export function chainReportMessage(r: ChainReportData): VerifyChainResponse {
  if (r.ok) return { ok: true, entries: r.entries, head_hash: r.head_hash ?? undefined, broken: undefined };
  const b = r.broken;
  return {
    ok: false,
    entries: r.entries,
    head_hash: undefined,
    broken: { seq: b.seq, id: b.id ?? undefined, problem: PROBLEM.value(b.problem), expected_seq: b.expected_seq },
  };
}

/** A chain report as clients see it: {ok: true, entries, head_hash} or {ok: false, entries, broken}. */
export function chainReportObject(r: VerifyChainResponse): ChainReportData {
  if (r.ok) return { ok: true, entries: r.entries, head_hash: r.head_hash ?? null };
  const b = r.broken;
  if (!b) throw new Error('a broken chain report without where it breaks');
  return {
    ok: false,
    entries: r.entries,
    broken: {
      seq: b.seq,
      id: b.id ?? null,
      problem: PROBLEM.word(b.problem) as ChainProblemWord,
      ...(b.expected_seq !== undefined ? { expected_seq: b.expected_seq } : {}),
    },
  };
}

export const chainReportJson = (r: VerifyChainResponse): string => JSON.stringify(chainReportObject(r));
