import { departmentReferences, identity, records, recordsWire } from '@lab/contracts';
import { type CallerContext, DomainError, PeerClient, type ServiceDeps } from '@lab/kit';
import type { DepartmentHolds } from './department-holds.js';
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
  private readonly departmentRefs: PeerClient<typeof departmentReferences.DepartmentReferenceServiceService>;
  private readonly services: PeerClient<typeof records.RecordServiceService>[] = [];

  constructor(private readonly deps: Pick<ServiceDeps, 'secret' | 'peers'>) {
    this.identity = new PeerClient(identity.IdentityServiceClient, 'identity', deps.secret, deps.peers);
    this.departmentRefs = new PeerClient(departmentReferences.DepartmentReferenceServiceClient, 'identity', deps.secret, deps.peers);
  }

  /** Departments held for the writes that name them, at identity (decision 056). */
  readonly departmentHolds: DepartmentHolds = {
    hold: async (caller, resource, department_id, hold_id) => {
      try {
        await this.departmentRefs.get().call('holdDepartment', { org_id: orgOf(caller), department_id, resource, hold_id }, caller);
        return true;
      } catch (err) {
        if (err instanceof DomainError && err.kind === 'not_found') return false;
        throw err;
      }
    },
    release: async (caller, hold_id) => {
      await this.departmentRefs.get().call('releaseDepartmentHold', { hold_id }, caller);
    },
    counted: async (caller, change) => {
      const d = change.data as { resource: string; from: string | null; to: string | null; hold_id: string | null };
      await this.departmentRefs.get().call(
        'countReferenceChange',
        {
          event_id: change.id,
          org_id: orgOf(caller),
          resource: d.resource,
          from: d.from ?? undefined,
          to: d.to ?? undefined,
          hold_id: d.hold_id ?? undefined,
        },
        caller,
      );
    },
  };

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
    this.departmentRefs.close();
    for (const c of this.services) c.close();
  }
}

function orgOf(caller: CallerContext): string {
  if (!caller.org_id) throw DomainError.forbidden('no organisation selected', 'org_required');
  return caller.org_id;
}
