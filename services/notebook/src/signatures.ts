import { sql } from 'drizzle-orm';
import { DomainError, rows, validationFailed, type CallerContext, type Executor } from '@lab/kit';
import { assertMayWrite, type RecordJson } from '@lab/records';
import { contentHash } from './content-hash.js';
import { experiments } from './experiments.js';

/** What a signature says about the version it signs; the order is the usual order of signing. */
export const MEANINGS = ['authorship', 'review', 'approval'] as const;
export type Meaning = (typeof MEANINGS)[number];

/** The request's meaning; none given is authorship, the one signature there was before meanings. */
export function parseMeaning(value: string | undefined): Meaning {
  if (!value) return 'authorship';
  if ((MEANINGS as readonly string[]).includes(value)) return value as Meaning;
  throw validationFailed([{ path: 'meaning', message: `must be one of ${MEANINGS.join(', ')}` }]);
}

/** A signature as stored and shown in the manifest. */
export interface Signature {
  id: string;
  experiment_id: string;
  meaning: Meaning;
  signer_id: string;
  signer_name: string | null;
  signed_at: string;
  content_hash: string | null;
}

/** The signatures of one experiment version of the caller's organisation, in signing order. */
export function signaturesOf(exec: Executor, caller: CallerContext, experimentId: string): Promise<Signature[]> {
  return rows<Signature>(
    exec,
    sql`select id, experiment_id, meaning, signer_id, signer_name,
          to_char(signed_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as signed_at, content_hash
        from notebook.experiment_signatures
        where org_id = ${caller.org_id}::uuid and experiment_id = ${experimentId}::uuid
        order by signed_at, id`,
  );
}

/**
 * The manifest of a version: each signature with the hash algorithm and whether
 * the version's content still gives the hash it signed (null for a signature made
 * before manifests kept hashes).
 */
export function manifest(signatures: Signature[], row: RecordJson): RecordJson[] {
  const current = contentHash(row);
  return signatures.map((s) => ({
    ...s,
    hash_algorithm: 'sha256',
    content_matches: s.content_hash === null ? null : s.content_hash === current,
  }));
}

/**
 * The authors of an entry: whoever is author or creator of any of its versions,
 * or signed one of them for authorship. An amendment carries over the content of
 * the version it amends, so the author of that content is an author of the
 * amendment too, and cannot review what is largely their own work.
 */
export async function authorsOf(exec: Executor, caller: CallerContext, displayId: string): Promise<Set<string>> {
  const found = await rows<{ id: string }>(
    exec,
    sql`select e.author_id as id from notebook.experiments e
          where e.org_id = ${caller.org_id}::uuid and e.display_id = ${displayId} and e.author_id is not null
        union
        select e.created_by from notebook.experiments e
          where e.org_id = ${caller.org_id}::uuid and e.display_id = ${displayId} and e.created_by is not null
        union
        select s.signer_id from notebook.experiment_signatures s
          join notebook.experiments e on e.id = s.experiment_id and e.org_id = s.org_id
          where e.org_id = ${caller.org_id}::uuid and e.display_id = ${displayId} and s.meaning = 'authorship'`,
  );
  return new Set(found.map((r) => r.id));
}

/**
 * Who may sign a version for authorship: it says "I wrote this" and locks the
 * version, so it is its author's to give, and only while they may change it
 * (the experiments' record rule, which PATCH applies: the same 403). The
 * version's author is its author_id (for an amendment, whoever amended) or its
 * creator; the author of an earlier version is not, since the amendment's
 * changes are someone else's. A version no person wrote (made by a token
 * without a user) is signed by whoever may change it, who takes its authorship
 * on. Checked before the state of the signatures: 403 is "this person may
 * never", so the author's own signing is what may answer 409.
 */
export function assertMayAuthor(caller: CallerContext, row: RecordJson): void {
  assertMayWrite(experiments, caller, row);
  const authors = [row.author_id, row.created_by].filter((id): id is string => typeof id === 'string');
  if (authors.length && !authors.some((id) => id === caller.user_id)) {
    throw DomainError.forbidden('only the author of this version of the experiment can sign it for authorship');
  }
}

/**
 * Who may add a signature of this meaning. Each meaning is signed once per
 * version (the second is 409 already_signed, as the first signing always was);
 * review and approval come after authorship, and never from an author of the
 * entry (see authorsOf) nor from someone who signed the version already: four
 * eyes at least, six for review and approval.
 */
export function assertMaySign(userId: string, meaning: Meaning, signatures: Signature[], authors: Set<string>): void {
  const same = signatures.find((s) => s.meaning === meaning);
  if (same) throw DomainError.conflict(`the experiment already carries a ${meaning} signature`, 'already_signed', { signature_id: same.id });
  if (meaning === 'authorship') return;
  if (authors.has(userId)) {
    throw DomainError.forbidden(`an author of the experiment cannot sign it for ${meaning}`, 'signer_is_author');
  }
  if (!signatures.some((s) => s.meaning === 'authorship')) {
    throw DomainError.conflict(`the experiment needs its authorship signature before ${meaning}`, 'authorship_required');
  }
  if (signatures.some((s) => s.signer_id === userId)) {
    throw DomainError.forbidden('a person signs a version once: review and approval need different people', 'signer_already_signed');
  }
}
