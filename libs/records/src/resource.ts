import type { SQL } from 'drizzle-orm';
import type { z } from 'zod';
import type { RecordCase } from '@lab/contracts';
import { type CallerContext, type Tx, type Emitter } from '@lab/kit';
import type { ReferenceTarget } from './references.js';

/** A record as PostgreSQL rendered it (JSON object of the visible columns). */
export type RecordJson = Record<string, unknown>;

/** How an equality filter value from the query string is parsed and compared. */
export type FilterType = 'uuid' | 'string' | 'date' | 'boolean';

export interface ListLimits {
  default: number;
  max: number;
}

/** What a resource lets a caller do; see ResourceConfig for the hooks. */
export interface ResourceConfig<C extends z.ZodType = z.ZodType, U extends z.ZodType = z.ZodType> {
  /** name in the URL, e.g. "samples" */
  name: string;
  /** the case of lab.common.v1.Record whose message its records travel as */
  record: RecordCase;
  /** schema-qualified table; it must have id, org_id, created_at, updated_at */
  table: string;
  /** resource name written into audit records (default: name) */
  auditResource?: string;
  /**
   * Create body. Use z.strictObject so that unknown and read-only fields are
   * rejected with 400 naming them.
   */
  create: C;
  /**
   * Update body: the writable fields only, all optional, strict. Columns that no
   * client may set (ids, signatures, authorship, timestamps) are simply absent.
   */
  update: U;
  /** query keys allowed as equality filters, with the type of their value */
  filters?: Record<string, FilterType>;
  /**
   * Text columns a person knows a record by (name, title, display id): a list's
   * `label_prefix` keeps the records one of them starts with, case-insensitively
   * (what an MCP client completes a record id from)
   */
  labels?: string[];
  /** columns a list may be ordered by (created_at is always allowed) */
  orderBy?: string[];
  /** default order of lists (default created_at desc) */
  defaultOrder?: { by: string; dir: 'asc' | 'desc' };
  /** page size bounds (default 50, max 500) */
  limits?: ListLimits;
  /** timestamp column that the `from` / `to` query keys bound (sub-resource lists) */
  rangeColumn?: string;
  /** columns never rendered (org_id is always hidden) */
  hidden?: string[];
  /** sub-resource: the column holding the parent id of ListRecords/GetRecord/... */
  parent?: {
    column: string;
    /**
     * throws (typically 404) when the parent is not accessible to the caller; with
     * `forInsert`, holds the parent (FOR KEY SHARE) to the end of the transaction,
     * so a delete running at the same time waits for the child's insert instead of
     * making its foreign key fail (a 500) after the check said yes
     */
    check?: (tx: Tx, caller: CallerContext, parentId: string, forInsert: boolean) => Promise<void>;
  };
  /**
   * Record-level visibility: an SQL predicate over the table alias `t`, or
   * undefined when the caller sees every record of the organisation.
   */
  canRead?: (caller: CallerContext) => SQL | undefined;
  /**
   * Body fields that name another record, and what they must name (a record of
   * this service's table, or of a peer: see ReferenceTarget). The engine checks
   * each one a create or update body gives, in the caller's organisation: 400
   * naming the field otherwise, nothing written.
   */
  references?: Record<string, ReferenceTarget>;
  /** Record-level write permission on an existing (or about-to-exist) record. */
  canWrite?: (caller: CallerContext, row: RecordJson) => boolean;
  /**
   * Refuses any change of a record in a state that forbids it (a signed
   * experiment is locked): throws a DomainError, typically a 409. Runs for
   * updates and deletes, after the permission checks, on the locked row.
   */
  assertUnlocked?: (row: RecordJson) => void;
  /** Delete permission (default: the permission model's `delete`, an administrator). */
  canDelete?: (caller: CallerContext, row: RecordJson) => boolean;
  /**
   * Turns the validated create body into column values (add server-set
   * columns, check references). id, org_id and created_by are set by the engine.
   */
  beforeCreate?: (tx: Tx, caller: CallerContext, input: z.infer<C>) => Promise<Record<string, unknown>>;
  /**
   * Creates may share one transaction with the other creates of the moment (group
   * commit, the kit's shared-tx.ts): for resources created in bursts whose create
   * hooks only emit, or change rows with single statements (no read, then write,
   * of a row another create could change in between). The engine may run a
   * create's transaction twice (once shared, once alone).
   */
  sharedCreates?: boolean;
  /** Turns the validated update body into column values (check references). */
  beforeUpdate?: (tx: Tx, caller: CallerContext, input: z.infer<U>, before: RecordJson) => Promise<Record<string, unknown>>;
  /** Emits the resource's domain events; the audit record is written by the engine. */
  afterCreate?: (tx: Tx, emit: Emitter, caller: CallerContext, before: null, after: RecordJson) => Promise<void> | void;
  afterUpdate?: (tx: Tx, emit: Emitter, caller: CallerContext, before: RecordJson, after: RecordJson) => Promise<void> | void;
  afterDelete?: (tx: Tx, emit: Emitter, caller: CallerContext, before: RecordJson, after: null) => Promise<void> | void;
}

/** A checked resource definition, as the engine uses it. */
export interface Resource extends ResourceConfig {
  auditResource: string;
  filters: Record<string, FilterType>;
  labels: string[];
  orderBy: string[];
  defaultOrder: { by: string; dir: 'asc' | 'desc' };
  limits: ListLimits;
  hidden: string[];
}

const IDENT = /^[a-z_][a-z0-9_]*$/;
const TABLE = /^[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*$/;

/**
 * Declares a generic CRUD resource. Identifiers are checked here once, because
 * the engine puts the table and column names into SQL text.
 */
export function defineResource<C extends z.ZodType, U extends z.ZodType>(config: ResourceConfig<C, U>): Resource {
  if (!TABLE.test(config.table)) throw new Error(`resource ${config.name}: table must be schema.table, got ${config.table}`);
  const filters = config.filters ?? {};
  const orderBy = [...new Set(['created_at', ...(config.orderBy ?? [])])];
  const defaultOrder = config.defaultOrder ?? { by: 'created_at', dir: 'desc' as const };
  const hidden = [...new Set(['org_id', ...(config.hidden ?? [])])];
  const labels = config.labels ?? [];
  const columns = [...Object.keys(filters), ...labels, ...orderBy, defaultOrder.by, ...hidden];
  if (config.rangeColumn) columns.push(config.rangeColumn);
  if (config.parent) columns.push(config.parent.column);
  for (const [field, target] of Object.entries(config.references ?? {})) {
    columns.push(field);
    if ('table' in target && !TABLE.test(target.table)) throw new Error(`resource ${config.name}: reference ${field} must name schema.table`);
  }
  for (const c of columns) {
    if (!IDENT.test(c)) throw new Error(`resource ${config.name}: bad column name ${c}`);
  }
  if (!orderBy.includes(defaultOrder.by)) throw new Error(`resource ${config.name}: default order ${defaultOrder.by} is not allowlisted`);
  return {
    ...(config as unknown as ResourceConfig),
    auditResource: config.auditResource ?? config.name,
    filters,
    labels,
    orderBy,
    defaultOrder,
    limits: config.limits ?? { default: 50, max: 500 },
    hidden,
  };
}

/**
 * What the gateway's OpenAPI document reads of a resource: its body schemas and
 * the columns a list may be ordered, filtered and matched by label. Each record
 * service exports these (its record-schemas.ts), so the document describes the
 * very schemas the service validates with.
 */
export function recordListing(r: Resource) {
  return {
    create: r.create,
    update: r.update as Resource['update'] | undefined,
    orderBy: r.orderBy,
    filters: r.filters,
    labels: r.labels,
  };
}
