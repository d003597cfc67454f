import { identity, recordObject, records, recordsWire } from '@lab/contracts';
import { rm } from 'node:fs/promises';
import { createLogger, newId, runService, RpcClient, type CallerContext, type PeerAddresses, type RunningService } from '@lab/kit';
import { freshDatabaseUrl, uniqueExchange } from './backing.js';
import { loadDefinition } from './stack.js';
import { TEST_SECRET, testBus } from './service-harness.js';

/**
 * The real services that own what another service's references name (identity:
 * departments and members; notebook: projects and experiment entries), for a
 * service tested on its own, whose writes check references there: start it with
 * `peers` from here. What a reference names is made in them, as it would be.
 */
export interface ReferenceOwners {
  peers: PeerAddresses;
  /** a new organisation of identity */
  org(): Promise<string>;
  /** a new department of the organisation */
  department(orgId: string): Promise<string>;
  /** a new user, a member of the organisation with the role (and department) */
  member(orgId: string, role: string, departmentId?: string | null): Promise<string>;
  /** a record of the notebook, created as `caller` (its organisation) */
  notebookRecord(resource: 'experiments' | 'projects', body: Record<string, unknown>, caller: CallerContext): Promise<string>;
  /**
   * Stops the owners. Their databases are left to the suite's dropFreshDatabases:
   * it drops every fresh database of the process, so stop the owners before it runs
   * (before the service under test's TestService.stop()).
   */
  stop(): Promise<void>;
}

const OPERATOR: CallerContext = {
  org_id: null,
  user_id: null,
  role: null,
  department_id: null,
  scopes: ['*'],
  token_kind: 'operator',
  token_id: null,
  request_id: 'reference-owners',
};

export async function startReferenceOwners(names: ('identity' | 'notebook')[] = ['identity']): Promise<ReferenceOwners> {
  const running: Record<string, RunningService> = {};
  const address = (name: string) => running[name]?.address;
  const bus = await testBus(uniqueExchange());
  const dataDir = `/tmp/lab-reference-owners-${newId()}`;
  for (const name of names) {
    const def = await loadDefinition(name);
    if (!def) throw new Error(`no service package @lab/${name}`);
    running[name] = await runService(def, {
      log: createLogger(name, 'silent'),
      bus,
      secret: TEST_SECRET,
      databaseUrl: await freshDatabaseUrl(),
      dataDir,
      grpcAddress: '127.0.0.1:0',
      poolSize: 4,
      // the notebook checks its own references with identity: the same address book
      peers: address,
    });
  }
  const idc = running.identity
    ? new RpcClient<typeof identity.IdentityServiceService>(identity.IdentityServiceClient, address('identity')!, { secret: TEST_SECRET })
    : undefined;
  const nbc = running.notebook
    ? new RpcClient<typeof records.RecordServiceService>(recordsWire.Client, address('notebook')!, { secret: TEST_SECRET })
    : undefined;
  const need = <T>(c: T | undefined, name: string): T => {
    if (!c) throw new Error(`${name} was not started`);
    return c;
  };
  return {
    peers: address,
    org: async () => (await need(idc, 'identity').call('createOrg', { name: `org ${newId()}`, modules: [] }, OPERATOR)).id,
    department: async (org_id) => (await need(idc, 'identity').call('createDepartment', { org_id, name: `dept ${newId()}` }, OPERATOR)).id,
    member: async (org_id, role, department_id) => {
      const user = await need(idc, 'identity').call('createUser', { email: `u${newId()}@example.test` }, OPERATOR);
      await need(idc, 'identity').call('putMember', { org_id, user_id: user.id, role, department_id: department_id ?? undefined }, OPERATOR);
      return user.id;
    },
    notebookRecord: async (resource, body, caller) =>
      recordObject((await need(nbc, 'notebook').call('createRecord', { resource, body, parent_id: '' }, caller)).record!).id as string,
    stop: async () => {
      idc?.close();
      nbc?.close();
      for (const s of Object.values(running).reverse()) await s.stop();
      await bus.close();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}
