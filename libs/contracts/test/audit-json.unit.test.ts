import { audit, auditRecordFromRow, auditRecordObject, auditRecordsJson, chainReportJson, chainReportMessage, type ChainReportData } from '@lab/contracts';

/**
 * Audit entries as the audit service's query renders them (json_build_object,
 * times as UTC with six digits and "Z") go through the typed messages and the
 * wire and come back as the same JSON: nulls as null, times to the microsecond,
 * before and after as the objects they were.
 */
const ID = '0190a0c8-0000-7000-8000-00000000000a';
const ID2 = '0190a0c8-0000-7000-8000-00000000000b';

const ENTRY = `{"id":"${ID}","created_at":"2026-11-26T10:00:00.000100Z","occurred_at":"2026-11-26T09:59:59.999999Z","service":"notebook","action":"update","resource":"sample","record_id":"${ID2}","actor_user_id":"${ID2}","actor_token_id":null,"token_kind":"api_key","changed_fields":["name","metadata"],"before":{"name":"S-1","metadata":{"n":1.5,"tags":["a",null,true],"deep":{"x":{}}}},"after":{"name":"S-2 \\"quoted\\"","metadata":{}},"request_id":"req-1","reason":null,"meaning":null,"seq":42,"prev_hash":"${'a'.repeat(64)}","hash":"${'b'.repeat(64)}"}`;
const BARE = `{"id":"${ID2}","created_at":"2026-11-26T10:00:00.000000Z","occurred_at":"2026-11-26T10:00:00.000000Z","service":"identity","action":"sign_in","resource":"session","record_id":null,"actor_user_id":null,"actor_token_id":null,"token_kind":"system","changed_fields":[],"before":null,"after":null,"request_id":null,"reason":"because","meaning":"authorship","seq":null,"prev_hash":null,"hash":null}`;

const overWire = (records: audit.AuditRecord[]) => audit.ListAuditResponse.decode(audit.ListAuditResponse.encode({ records, count: records.length }).finish());

describe('audit entries through the typed messages', () => {
  it('come back as the JSON the audit service wrote, nulls and empty lists kept', () => {
    const records = [ENTRY, BARE].map((t) => auditRecordFromRow(JSON.parse(t) as Record<string, unknown>));
    const decoded = overWire(records);
    expect(auditRecordsJson(decoded.records)).toBe(`[${ENTRY},${BARE}]`);
    // the export jobs read the same entries as objects
    expect(decoded.records.map(auditRecordObject)).toEqual([JSON.parse(ENTRY), JSON.parse(BARE)]);
  });
});

describe('chain reports through the typed message', () => {
  const through = (r: ChainReportData) => audit.VerifyChainResponse.decode(audit.VerifyChainResponse.encode(chainReportMessage(r)).finish());

  it.each<[string, ChainReportData]>([
    ['a sound chain', { ok: true, entries: 6, head_hash: 'c'.repeat(64) }],
    ['an empty chain', { ok: true, entries: 0, head_hash: null }],
    ['an edited entry', { ok: false, entries: 2, broken: { seq: 3, id: ID, problem: 'hash_mismatch' } }],
    ['a gap', { ok: false, entries: 2, broken: { seq: 5, id: ID, problem: 'sequence_gap', expected_seq: 3 } }],
    ['entries cut off the end', { ok: false, entries: 4, broken: { seq: 6, id: null, problem: 'head_mismatch', expected_seq: 5 } }],
    ['a head past the last entry', { ok: false, entries: 4, broken: { seq: 4, id: null, problem: 'head_mismatch' } }],
  ])('%s is answered as JSON.stringify wrote the report', (_what, report) => {
    expect(chainReportJson(through(report))).toBe(JSON.stringify(report));
  });
});
