import { audit, identity, records } from '@lab/contracts';
import { PeerClient, type CallerContext } from '@lab/kit';
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

const PAGE = 500;
/** A job reads at most this many records of one resource (a bound on memory). */
const MAX_RECORDS = 100_000;

/**
 * The data a job reads, over gRPC from the services that own it (never their
 * tables), acting for whoever created the job: a job of a researcher shows what
 * that researcher may see.
 */
export class Sources {
  private readonly recordPeers = new Map<string, PeerClient<typeof records.RecordServiceService>>();
  readonly identity: PeerClient<typeof identity.IdentityServiceService>;
  readonly audit: PeerClient<typeof audit.AuditServiceService>;

  /** `addresses` as given win; the others come from the address book (deps.peers) when first needed. */
  constructor(
    private readonly secret: string,
    private readonly addresses: PeerAddresses,
    private readonly book: (peer: string) => string | undefined,
  ) {
    this.identity = new PeerClient(identity.IdentityServiceClient, 'identity', secret, addresses.identity ?? book);
    this.audit = new PeerClient(audit.AuditServiceClient, 'audit', secret, addresses.audit ?? book);
  }

  private records(resource: string) {
    const owner = OWNER[resource];
    if (!owner) throw new Error(`no owner for ${resource}`);
    let p = this.recordPeers.get(owner);
    if (!p) {
      p = new PeerClient(records.RecordServiceClient, owner, this.secret, this.addresses[owner] ?? this.book);
      this.recordPeers.set(owner, p);
    }
    return p.get();
  }

  /** The caller context of a job's reads: its creator, in its organisation, read-only. */
  static callerOf(job: JobRow): CallerContext {
    return {
      org_id: job.org_id,
      user_id: job.created_by,
      role: job.creator_role,
      department_id: job.creator_department_id,
      scopes: ['read'],
      token_kind: 'system',
      token_id: job.created_by_token_id,
      request_id: job.id,
    };
  }

  async get(caller: CallerContext, resource: string, id: string, parent_id = ''): Promise<Rec> {
    const r = await this.records(resource).call('getRecord', { resource, id, parent_id }, caller);
    return JSON.parse(r.json) as Rec;
  }

  /** Every record of a resource (optionally under a parent, filtered), oldest first. */
  async all(caller: CallerContext, resource: string, query: Record<string, string> = {}, parent_id = ''): Promise<Rec[]> {
    const out: Rec[] = [];
    for (let offset = 0; offset < MAX_RECORDS; offset += PAGE) {
      const r = await this.records(resource).call(
        'listRecords',
        { resource, parent_id, query: { order: 'asc', ...query, limit: String(PAGE), offset: String(offset) } },
        caller,
      );
      const page = JSON.parse(r.json) as Rec[];
      out.push(...page);
      if (page.length < PAGE) break;
    }
    return out;
  }

  /** The organisation's whole audit log (optionally a time range), oldest first. */
  async auditLog(caller: CallerContext, range: { from?: string; to?: string } = {}): Promise<Rec[]> {
    const out: Rec[] = [];
    let since: { since_created_at?: string; since_id?: string } = {};
    for (;;) {
      const r = await this.audit.get().call('listAudit', { limit: 1000, ...range, ...since }, caller);
      out.push(...(JSON.parse(r.json) as Rec[]));
      if (!r.next_since_created_at || !r.next_since_id || out.length >= MAX_RECORDS) break;
      since = { since_created_at: r.next_since_created_at, since_id: r.next_since_id };
    }
    return out;
  }

  async member(caller: CallerContext, user_id: string): Promise<Rec | undefined> {
    const r = await this.identity.get().call('listMembers', { org_id: caller.org_id!, user_ids: [user_id] }, caller);
    return r.members[0] as unknown as Rec | undefined;
  }

  close(): void {
    for (const p of this.recordPeers.values()) p.close();
    this.identity.close();
    this.audit.close();
  }
}
