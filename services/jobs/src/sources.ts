import {
  audit,
  auditRecordObject,
  experimentJson,
  identity,
  notebook,
  jsonString,
  recordObject,
  records,
  recordsJson,
  recordsWire,
  signatureObject,
} from '@lab/contracts';
import { DomainError, PeerClient, validationFailed, type CallerContext } from '@lab/kit';
import type { JobRow } from './store.js';

export type Rec = Record<string, unknown>;

export interface PeerAddresses {
  notebook?: string;
  inventory?: string;
  equipment?: string;
  audit?: string;
  identity?: string;
}

/** Where each record resource lives. */
const OWNER: Record<string, 'notebook' | 'inventory' | 'equipment'> = {
  experiments: 'notebook',
  projects: 'notebook',
  samples: 'notebook',
  reagents: 'inventory',
  'stock-items': 'inventory',
  'stock-movements': 'inventory',
  inventories: 'inventory',
  equipment: 'equipment',
  'equipment/usage': 'equipment',
  'equipment/maintenance': 'equipment',
  'equipment/calibrations': 'equipment',
  'equipment/qualifications': 'equipment',
};

/** Records per listRecords call when none is configured: the record services' largest page. */
const DEFAULT_PAGE_SIZE = 500;
/** `all` holds a resource in memory: past this many records the job fails rather than work from part of it. */
const MAX_IN_MEMORY = 100_000;
/**
 * What one report job may read into memory, in all (JOBS_REPORT_MAX_BYTES of
 * JSON): records carry free-form objects, so a count alone would let a few
 * thousand large ones take the worker's memory (and every organisation's jobs
 * with it) several times over.
 */
export interface ReadBudget {
  limit: number;
  used: number;
}

/**
 * The data a job reads, over gRPC from the services that own it (never their
 * tables), acting for whoever created the job: a job of a researcher shows what
 * that researcher may see.
 */
export class Sources {
  private readonly recordPeers = new Map<string, PeerClient<typeof records.RecordServiceService>>();
  readonly identity: PeerClient<typeof identity.IdentityServiceService>;
  readonly audit: PeerClient<typeof audit.AuditServiceService>;
  readonly notebook: PeerClient<typeof notebook.NotebookServiceService>;

  /** `addresses` as given win; the others come from the address book (deps.peers) when first needed. */
  constructor(
    private readonly secret: string,
    private readonly addresses: PeerAddresses,
    private readonly book: (peer: string) => string | undefined,
    /** records per call, for both records and audit pages; at most what the record services take (500) */
    private readonly pageSize = DEFAULT_PAGE_SIZE,
  ) {
    this.identity = new PeerClient(identity.IdentityServiceClient, 'identity', secret, addresses.identity ?? book);
    this.audit = new PeerClient(audit.AuditServiceClient, 'audit', secret, addresses.audit ?? book);
    this.notebook = new PeerClient(notebook.NotebookServiceClient, 'notebook', secret, addresses.notebook ?? book);
  }

  private records(resource: string) {
    const owner = OWNER[resource];
    if (!owner) throw new Error(`no owner for ${resource}`);
    let p = this.recordPeers.get(owner);
    if (!p) {
      p = new PeerClient(recordsWire.Client, owner, this.secret, this.addresses[owner] ?? this.book);
      this.recordPeers.set(owner, p);
    }
    return p.get();
  }

  /**
   * The caller context of a job's reads: its creator, in its organisation,
   * read-only unless the job type writes (an import: `write`, still judged by the
   * creator's role in the services that own the records).
   */
  static callerOf(job: JobRow, scopes: string[] = ['read']): CallerContext {
    return {
      org_id: job.org_id,
      user_id: job.created_by,
      role: job.creator_role,
      department_id: job.creator_department_id,
      scopes,
      token_kind: 'system',
      token_id: job.created_by_token_id,
      request_id: job.id,
    };
  }

  async get(caller: CallerContext, resource: string, id: string, parent_id = ''): Promise<Rec> {
    const r = await this.records(resource).call('getRecord', { resource, id, parent_id }, caller);
    return recordObject(r.record!);
  }

  /**
   * The record a job's input names in `field`. When its owner does not know it
   * (an id of another kind of record, say a sample's as entry_id, or one deleted
   * since), no retry can find it: the answer is an invalid input naming the
   * field, which the worker fails at once instead of retrying until dead.
   */
  async named(caller: CallerContext, resource: string, id: string, field: string): Promise<Rec> {
    try {
      return await this.get(caller, resource, id);
    } catch (err) {
      if (err instanceof DomainError && err.kind === 'not_found') {
        throw validationFailed(
          [{ path: `input.${field}`, message: `names no ${resource} record of this organisation visible to the job's creator` }],
          `input.${field} names no ${resource} record`,
        );
      }
      throw err;
    }
  }

  /**
   * Every record of a resource (optionally under a parent, filtered), oldest
   * first, a page per call, by keyset: each call costs the page it reads, where
   * offset pages each count the whole list and pass over every record before
   * them. An empty page is yielded too: readers check between pages whether to
   * stop, and a long run of empty ones (sub-resources of many equipment) must not
   * hide a stop.
   */
  async *pages(caller: CallerContext, resource: string, query: Record<string, string> = {}, parent_id = ''): AsyncGenerator<Rec[]> {
    for await (const json of this.pageTexts(caller, resource, query, parent_id)) yield JSON.parse(json) as Rec[];
  }

  private async *pageTexts(caller: CallerContext, resource: string, query: Record<string, string>, parent_id: string): AsyncGenerator<string> {
    const limit = String(this.pageSize);
    for (let after = {}; ;) {
      const r = await this.records(resource).call('listRecords', { resource, parent_id, query: { ...query, limit }, keyset: true, ...after }, caller);
      // as the API answers it: reports and exports show records as clients see them
      yield jsonString(recordsJson(r.records));
      if (!r.next_created_at) return;
      after = { after_created_at: r.next_created_at, after_id: r.next_id };
    }
  }

  /**
   * Every record of a resource in memory, for reports that draw from the whole
   * set; one that does not fit fails the job instead of being drawn from a part.
   */
  async all(caller: CallerContext, budget: ReadBudget, resource: string, query: Record<string, string> = {}, parent_id = ''): Promise<Rec[]> {
    const out: Rec[] = [];
    for await (const json of this.pageTexts(caller, resource, query, parent_id)) {
      // the text's length, in UTF-16 units: what the page costs in memory, near enough
      budget.used += json.length;
      if (budget.used > budget.limit) {
        throw new DomainError(
          'too_large',
          'too_many_records',
          `the records to draw from hold more than ${budget.limit} bytes, more than a report can hold (JOBS_REPORT_MAX_BYTES)`,
        );
      }
      const page = JSON.parse(json) as Rec[];
      if (out.length + page.length > MAX_IN_MEMORY) {
        throw new DomainError('too_large', 'too_many_records', `${resource} has more than ${MAX_IN_MEMORY} records, more than a report can hold`);
      }
      out.push(...page);
    }
    return out;
  }

  /** The organisation's whole audit log (optionally a time range), oldest first, a page per call (empty ones too). */
  async *auditPages(caller: CallerContext, range: { from?: string; to?: string } = {}): AsyncGenerator<Rec[]> {
    let since: { since_created_at?: string; since_id?: string } = {};
    for (;;) {
      const r = await this.audit.get().call('listAudit', { limit: this.pageSize, ...range, ...since }, caller);
      yield r.records.map(auditRecordObject);
      if (!r.next_since_created_at || !r.next_since_id) return;
      since = { since_created_at: r.next_since_created_at, since_id: r.next_since_id };
    }
  }

  /** The signature manifest of an experiment version, in signing order. */
  async signatures(caller: CallerContext, experimentId: string): Promise<Rec[]> {
    const r = await this.notebook.get().call('listExperimentSignatures', { id: experimentId }, caller);
    return r.signatures.map(signatureObject);
  }

  /** Every version of an experiment's entry (amendments included), oldest first, as clients see them. */
  async versions(caller: CallerContext, experimentId: string): Promise<Rec[]> {
    const r = await this.notebook.get().call('listExperimentVersions', { id: experimentId }, caller);
    return r.experiments.map((e) => JSON.parse(experimentJson(e)) as Rec);
  }

  /**
   * Creates a record as the caller, through its owner: the owning service checks
   * the body and the caller's permission, and audits the write with its event.
   */
  async create(caller: CallerContext, resource: string, body: Rec): Promise<Rec> {
    const r = await this.records(resource).call('createRecord', { resource, body, parent_id: '' }, caller);
    return recordObject(r.record!);
  }

  /** The organisation's members among these users (name and email for a crate's Person entities). */
  async members(caller: CallerContext, user_ids: string[]): Promise<Rec[]> {
    if (!user_ids.length) return [];
    const r = await this.identity.get().call('listMembers', { org_id: caller.org_id!, user_ids }, caller);
    return r.members as unknown as Rec[];
  }

  async member(caller: CallerContext, user_id: string): Promise<Rec | undefined> {
    const r = await this.identity.get().call('listMembers', { org_id: caller.org_id!, user_ids: [user_id] }, caller);
    return r.members[0] as unknown as Rec | undefined;
  }

  close(): void {
    for (const p of this.recordPeers.values()) p.close();
    this.identity.close();
    this.audit.close();
    this.notebook.close();
  }
}
