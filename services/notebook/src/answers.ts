import { timestampFromText, type notebook, type notebookRecords, type records } from '@lab/contracts';
import type { RecordJson, StoredRecord } from '@lab/records';

/** The typed answers of the notebook's own RPCs (beyond the generic record service). */

/** The message of an experiment record of the records engine. */
export function experimentIn(record: records.Record): notebookRecords.Experiment {
  const kind = record.kind;
  if (kind?.$case !== 'experiment') throw new Error(`not an experiment record: ${kind?.$case}`);
  return kind.value;
}

/** An experiment as the records engine stored it, as its message. */
export const experimentOf = (stored: StoredRecord): notebookRecords.Experiment => experimentIn(stored.record);

/** A manifest (signatures.ts) as messages. */
export function signatureMessages(list: RecordJson[]): notebook.ExperimentSignature[] {
  return list.map((s) => ({
    id: String(s.id),
    experiment_id: String(s.experiment_id),
    meaning: String(s.meaning),
    signer_id: String(s.signer_id),
    signer_name: (s.signer_name as string | null) ?? undefined,
    signed_at: timestampFromText(String(s.signed_at)),
    content_hash: (s.content_hash as string | null) ?? undefined,
    hash_algorithm: String(s.hash_algorithm),
    content_matches: (s.content_matches as boolean | null) ?? undefined,
  }));
}
