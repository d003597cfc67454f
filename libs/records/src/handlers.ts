import { records } from '@lab/contracts';
import {
  type CallerContext,
  type Executor,
  type Tx,
  DomainError,
  type Handlers,
  type Emitter,
  type WriteOptions,
  type ServiceDeps,
  isGuid,
  parseWith,
  structBody,
  validationFailed,
  isoTimestamp,
} from '@lab/kit';
import { assertMay, denial, may, recordWriteDenied } from '@lab/permissions';
import { parseListQuery } from './list-query.js';
import type { RecordJson, Resource } from './resource.js';
import { deleteRow, getRecordOr404, insertRecord, listRecords, listRecordsByKeyset, updateColumns, type KeysetAfter, type StoredRecord } from './store.js';
import { checkLocalReferences, checkRemoteReferences, type RemoteChecks } from './references.js';
import { departmentNamed, emitDepartmentChange, withDepartmentHold, withoutDepartment, type DepartmentHolds } from './department-holds.js';

type Deps = Pick<ServiceDeps, 'db' | 'outbox'>;

/**
 * The resource's record-level write rule, after the permission model's `write`
 * (a role that reads only is refused whatever the token's scopes say).
 */
export function assertMayWrite(r: Resource, caller: CallerContext, row: RecordJson): void {
  assertMay(caller, 'write');
  if (r.canWrite && !r.canWrite(caller, row)) throw recordWriteDenied(r.auditResource);
}

function parentOf(r: Resource, parentId: string): string | undefined {
  if (!r.parent) return undefined;
  if (!isGuid(parentId)) throw DomainError.notFound('parent record not found');
  return parentId;
}

/**
 * Query keys a keyset read cannot honour: its order is its own, and it skips
 * nothing. `offset=0` skips nothing either, and is the document's default, which
 * generated clients send with every request: it is taken.
 */
const NOT_KEYSET = ['offset', 'order', 'order_by'];
const harmless = (key: string, value: string) => key === 'offset' && /^0+$/.test(value);

const KEYSET_TIME = isoTimestamp();

/** The id of a stored row (a UUID as text), for the audit entry. */
const idOf = (row: RecordJson | undefined): string => (typeof row?.id === 'string' ? row.id : '');

/** Where a keyset read starts, once its request is checked. */
function keysetOf(req: records.ListRecordsRequest): KeysetAfter | undefined {
  const given = NOT_KEYSET.filter((k) => req.query[k] !== undefined && !harmless(k, req.query[k]));
  if (given.length) throw validationFailed(given.map((k) => ({ path: k, message: `${k} cannot be given with keyset paging (since_created_at)` })));
  const { after_created_at: time, after_id: id } = req;
  if (!time) {
    if (id) throw validationFailed([{ path: 'since_id', message: 'must be given with since_created_at' }]);
    return undefined;
  }
  if (!KEYSET_TIME.safeParse(time).success) throw validationFailed([{ path: 'since_created_at', message: 'must be an ISO 8601 timestamp with offset' }]);
  if (!id) return { created_at: time };
  if (!isGuid(id)) throw validationFailed([{ path: 'since_id', message: 'must be a UUID' }]);
  return { created_at: time, id: id.toLowerCase() };
}

async function checkParent(tx: Tx, r: Resource, caller: CallerContext, parentId: string | undefined, forInsert = false) {
  if (r.parent?.check && parentId) await r.parent.check(tx, caller, parentId, forInsert);
}

/**
 * The lab.common.v1.RecordService of a service that owns generic CRUD resources.
 * Every statement filters by the caller's organisation and the resource's
 * visibility predicate; every write commits with its events and audit record.
 * PATCH and PUT (`replace`) behave the same: only the fields given change.
 */
export function recordServiceHandlers(
  deps: Deps,
  resources: Resource[],
  /**
   * the checks of references into other services that the resources declare
   * (ReferenceTarget.peer); with departmentHolds, a department a write names is
   * held at identity instead of checked (decision 056)
   */
  opts: { remote?: RemoteChecks; departmentHolds?: DepartmentHolds } = {},
): Handlers<typeof records.RecordServiceService> {
  const remote = opts.remote ?? {};
  const holds = opts.departmentHolds;
  const byName = new Map(resources.map((r) => [r.name, r]));
  // the references checked by asking their owners (a held department is not asked
  // again), worked out once per resource rather than on every write
  const askedOwners = new Map(resources.map((r) => [r, holds ? withoutDepartment(r.references) : r.references]));
  const checked = (r: Resource) => askedOwners.get(r);
  const resource = (name: string): Resource => {
    const r = byName.get(name);
    if (!r) throw DomainError.notFound(`unknown resource ${name}`);
    return r;
  };
  const { db, outbox } = deps;

  /**
   * A read is one statement, run without BEGIN/COMMIT (three round trips
   * instead of one on the hottest path); only a parent check adds a second
   * statement, and then both see one snapshot.
   */
  const read = <T>(r: Resource, caller: CallerContext, parentId: string | undefined, fn: (exec: Executor) => Promise<T>): Promise<T> =>
    r.parent?.check && parentId
      ? db.tx(async (tx) => {
          await checkParent(tx, r, caller, parentId);
          return fn(tx);
        })
      : fn(db.orm);

  /**
   * Runs a write and records its audit entry (with before/after) in the same
   * transaction. A keyed write's receipt keeps the answer in that transaction too:
   * the record as stored after it (the create and update answer), nothing after a
   * delete (its empty answer).
   */
  const audited = async (
    caller: CallerContext,
    r: Resource,
    action: 'create' | 'update' | 'delete',
    fn: (tx: Tx, emit: Emitter) => Promise<{ before: StoredRecord | null; after: StoredRecord | null }>,
    opts: WriteOptions = {},
  ): Promise<StoredRecord | null> =>
    outbox.write(
      caller,
      async (tx, emit) => {
        const { before, after } = await fn(tx, emit);
        emit.audit(caller.org_id, {
          action,
          resource: r.auditResource,
          record_id: idOf((after ?? before)?.row),
          before: before?.row ?? null,
          after: after?.row ?? null,
        });
        return after;
      },
      (after): records.RecordResponse | records.DeleteRecordResponse => (after ? { record: after.record } : {}),
      opts,
    );

  return {
    listRecords: async (req, caller) => {
      const r = resource(req.resource);
      const q = parseListQuery(req.query, r);
      const parentId = parentOf(r, req.parent_id);
      if (req.keyset) {
        const after = keysetOf(req);
        const page = await read(r, caller, parentId, (exec) => listRecordsByKeyset(exec, r, caller, q, parentId, after));
        return {
          records: page.records,
          total: 0,
          limit: page.cut ? page.shown : q.limit,
          offset: 0,
          cut_by_size: page.cut,
          next_created_at: page.next?.created_at,
          next_id: page.next?.id,
        };
      }
      const page = await read(r, caller, parentId, (exec) => listRecords(exec, r, caller, q, parentId));
      // a page cut short by its bytes reports what it holds as its limit: offset +
      // limit is then where the next page starts
      return { records: page.records, total: page.total, limit: page.cut ? page.shown : q.limit, offset: q.offset, cut_by_size: page.cut };
    },

    getRecord: async (req, caller) => {
      const r = resource(req.resource);
      const parentId = parentOf(r, req.parent_id);
      const found = await read(r, caller, parentId, (exec) => getRecordOr404(exec, r, caller, req.id, { parentId }));
      return { record: found.record };
    },

    createRecord: async (req, caller) => {
      const r = resource(req.resource);
      assertMay(caller, 'write');
      const input = parseWith(r.create, structBody(req.body));
      const parentId = parentOf(r, req.parent_id);
      await checkRemoteReferences(checked(r), remote, caller, input);
      const after = await withDepartmentHold(holds, caller, r, departmentNamed(r, input), (holdId, changes) =>
        audited(
          caller,
          r,
          'create',
          async (tx, emit) => {
            await checkParent(tx, r, caller, parentId, true);
            await checkLocalReferences(tx, r.references, caller, input);
            const values = r.beforeCreate ? await r.beforeCreate(tx, caller, input) : { ...(input as Record<string, unknown>) };
            if (r.parent && parentId) values[r.parent.column] = parentId;
            assertMayWrite(r, caller, { ...values, created_by: caller.user_id });
            const created = await insertRecord(tx, r, caller, values);
            await r.afterCreate?.(tx, emit, caller, null, created.row);
            emitDepartmentChange(emit, caller, r, null, created.row, holdId, changes);
            return { before: null, after: created };
          },
          { shared: r.sharedCreates },
        ),
      );
      return { record: after!.record };
    },

    updateRecord: async (req, caller) => {
      const r = resource(req.resource);
      assertMay(caller, 'write');
      const input = parseWith(r.update, structBody(req.body));
      const parentId = parentOf(r, req.parent_id);
      await checkRemoteReferences(checked(r), remote, caller, input);
      const after = await withDepartmentHold(holds, caller, r, departmentNamed(r, input), (holdId, changes) =>
        audited(caller, r, 'update', async (tx, emit) => {
          await checkParent(tx, r, caller, parentId);
          const before = await getRecordOr404(tx, r, caller, req.id, { parentId, lock: 'no key update' });
          assertMayWrite(r, caller, before.row);
          r.assertUnlocked?.(before.row);
          await checkLocalReferences(tx, r.references, caller, input);
          const values = r.beforeUpdate ? await r.beforeUpdate(tx, caller, input, before.row) : { ...(input as Record<string, unknown>) };
          // the row is locked by the read above: it is there to update
          const updated = (await updateColumns(tx, r, caller, req.id, values))!;
          await r.afterUpdate?.(tx, emit, caller, before.row, updated.row);
          emitDepartmentChange(emit, caller, r, before.row, updated.row, holdId, changes);
          return { before, after: updated };
        }),
      );
      return { record: after!.record };
    },

    deleteRecord: async (req, caller) => {
      const r = resource(req.resource);
      const parentId = parentOf(r, req.parent_id);
      await withDepartmentHold(holds, caller, r, undefined, (_, changes) =>
        audited(caller, r, 'delete', async (tx, emit) => {
          await checkParent(tx, r, caller, parentId);
          const before = await getRecordOr404(tx, r, caller, req.id, { parentId, lock: 'update' });
          const allowed = r.canDelete ? r.canDelete(caller, before.row) : may(caller, 'delete');
          if (!allowed) throw denial(caller, 'delete', `a ${r.auditResource}`);
          r.assertUnlocked?.(before.row);
          await deleteRow(tx, r, caller, req.id);
          await r.afterDelete?.(tx, emit, caller, before.row, null);
          emitDepartmentChange(emit, caller, r, before.row, null, null, changes);
          return { before, after: null };
        }),
      );
      return {};
    },
  };
}
