import { identity, records, recordsWire } from '@lab/contracts';
import { type CallerContext, DomainError, PeerClient, type ServiceDeps } from '@lab/kit';
import type { RemoteCheck } from './references.js';

/**
 * The RemoteChecks a record service registers for references into other
 * services, each asked as the caller and scoped to the caller's organisation by
 * the owner: members and departments (identity), and records of another record
 * service (its RecordService, which applies that owner's visibility: a record
 * the caller may not see is not one it may refer to). Clients connect when first
 * used; a peer that is away makes the write 503, never a write that skipped the
 * check.
 */
export class PeerReferences {
  private readonly identity: PeerClient<typeof identity.IdentityServiceService>;
  private readonly services: PeerClient<typeof records.RecordServiceService>[] = [];

  constructor(private readonly deps: Pick<ServiceDeps, 'secret' | 'peers'>) {
    this.identity = new PeerClient(identity.IdentityServiceClient, 'identity', deps.secret, deps.peers);
  }

  /** Users who are members of the caller's organisation (one call for every id). */
  readonly member: RemoteCheck = async (caller, ids) => {
    const r = await this.identity.get().call('listMembers', { org_id: orgOf(caller), user_ids: ids }, caller);
    return new Set(r.members.map((m) => m.user_id.toLowerCase()));
  };

  /** Departments of the caller's organisation (one call for every id). */
  readonly department: RemoteCheck = async (caller, ids) => {
    const r = await this.identity.get().call('listDepartments', { org_id: orgOf(caller), page: { limit: ids.length, offset: 0 }, department_ids: ids }, caller);
    return new Set(r.departments.map((d) => d.id.toLowerCase()));
  };

  /** Records of `resource` at the record service `peer`, read by id as the caller. */
  record(peer: string, resource: string): RemoteCheck {
    const service = new PeerClient<typeof records.RecordServiceService>(recordsWire.Client, peer, this.deps.secret, this.deps.peers);
    this.services.push(service);
    return async (caller, ids) => {
      const found = new Set<string>();
      for (const id of ids) {
        try {
          await service.get().call('getRecord', { resource, id, parent_id: '' }, caller);
          found.add(id);
        } catch (err) {
          if (!(err instanceof DomainError && err.kind === 'not_found')) throw err;
        }
      }
      return found;
    };
  }

  close(): void {
    this.identity.close();
    for (const c of this.services) c.close();
  }
}

function orgOf(caller: CallerContext): string {
  if (!caller.org_id) throw DomainError.forbidden('no organisation selected', 'org_required');
  return caller.org_id;
}
