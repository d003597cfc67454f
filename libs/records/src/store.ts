import { sql, type SQL } from 'drizzle-orm';
import { recordFromRowJson, type RecordCase, type records } from '@lab/contracts';
import { type CallerContext, type Executor, type Tx, rows, utcMicros, DomainError, newId, isGuid, cutByBytes, keysetPage, POINT_READ } from '@lab/kit';
import type { ListQuery } from './list-query.js';
import type { RecordJson, Resource } from './resource.js';

/**
 * The SQL of the records engine. Rows are rendered to JSON by PostgreSQL
 * (row_to_json keeps column order; pg and PGlite give identical text), and
 * written through jsonb_populate_record so that PostgreSQL converts every JSON
 * value to its column's type (text[], jsonb, date, uuid) the same way on both.
 */

/**
 * A record as stored: the JSON text PostgreSQL rendered, the parsed object
 * (events and audit entries carry it), and the typed message answers carry.
 */
export interface StoredRecord {
  json: string;
  row: RecordJson;
  record: records.Record;
}

const IDENT = /^[a-z_][a-z0-9_]*$/;
const columnCache = new WeakMap<Resource, Promise<string[]>>();

/** The table's columns in definition order, read once from the catalog. */
export function tableColumns(exec: Executor, r: Resource): Promise<string[]> {
  let cached = columnCache.get(r);
  if (!cached) {
    cached = rows<{ name: string }>(
      exec,
      sql`select attname::text as name from pg_attribute
          where attrelid = ${r.table}::regclass and attnum > 0 and not attisdropped order by attnum`,
    ).then((list) => list.map((c) => c.name));
    cached.catch(() => columnCache.delete(r));
    columnCache.set(r, cached);
  }
  return cached;
}

const table = (r: Resource) => sql.raw(r.table);
const col = (name: string) => sql`t.${sql.identifier(name)}`;
const quotedColumn = (name: string) => `t."${name.replace(/"/g, '""')}"`;

const rendered = new WeakMap<Resource, Promise<SQL>>();

/** The expression rendering a row `t` as the client sees it (built once per resource). */
function render(exec: Executor, r: Resource): Promise<SQL> {
  let cached = rendered.get(r);
  if (!cached) {
    cached = tableColumns(exec, r).then((cols) => {
      const shown = cols.filter((c) => !r.hidden.includes(c));
      // One raw chunk rather than a nested fragment per column: drizzle walks
      // every chunk of every statement, and this expression is in all of them.
      // The names come from the catalog and are quoted as identifiers.
      return sql.raw(`(select row_to_json(x) from (select ${shown.map(quotedColumn).join(', ')}) x)::text`);
    });
    cached.catch(() => rendered.delete(r));
    rendered.set(r, cached);
  }
  return cached;
}

/** The row and the message are made only when asked for: a plain read needs only the message. */
function stored(kind: RecordCase, json: string): StoredRecord {
  let row: RecordJson | undefined;
  let record: records.Record | undefined;
  return {
    json,
    get row() {
      return (row ??= JSON.parse(json) as RecordJson);
    },
    get record() {
      return (record ??= recordFromRowJson(kind, json));
    },
  };
}

/** org, visibility and parent conditions every read of a resource applies. */
function scope(r: Resource, caller: CallerContext, parentId: string | undefined, allVisible = false): SQL[] {
  if (!caller.org_id) throw DomainError.forbidden('no organisation selected', 'org_required');
  const where = [sql`t.org_id = ${caller.org_id}::uuid`];
  const visible = allVisible ? undefined : r.canRead?.(caller);
  if (visible) where.push(sql`(${visible})`);
  if (r.parent) where.push(sql`${col(r.parent.column)} = ${parentId ?? null}::uuid`);
  return where;
}

const CAST: Record<string, string> = { uuid: '::uuid', date: '::date', boolean: '::boolean', string: '' };

/**
 * One page of visible records and the total count, in one statement. `shown` is
 * how many records the page holds: fewer than the limit at the end of the list,
 * or when LIST_PAGE_BYTES cut it short (the caller reports that as its limit, so
 * a client paging by offset + limit pages on without a gap).
 */
export async function listRecords(
  exec: Executor,
  r: Resource,
  caller: CallerContext,
  q: ListQuery,
  parentId?: string,
): Promise<{ records: records.Record[]; total: number; shown: number; cut: boolean }> {
  const cond = sql.join(listConditions(r, caller, q, parentId), sql` and `);
  const dir = sql.raw(q.order);
  // The total is a count of its own, computed once for the statement: as a window
  // over the page's rows (count(*) over ()) it made PostgreSQL fetch every matching
  // row in order, whole, and spill them to disk before the first was given (552 ms
  // for a page of an organisation with a million samples, against 96 ms). The
  // page's sort keys ride along so the byte cut runs in the page's order; the
  // page_* names keep clear of the table's own columns.
  const total = sql`(select count(*) from ${table(r)} t where ${cond})::int`;
  const order = sql`order by ${col(q.orderBy)} ${dir}, t.id ${dir} limit ${q.limit} offset ${q.offset}`;
  const json = await render(exec, r);
  // Past an offset the page is chosen first and rendered after: rendered in the
  // same select, every row the offset passes over was turned into JSON and dropped
  // (with the count above, a client reading 100,000 samples by offset took 7.5 s
  // instead of 37.1 s). A first page skips nothing, and the wrapping select would
  // only cost it.
  const selected = q.offset
    ? sql`select ${json} as json, t.page_total as total, t.page_k, t.page_kid
          from (select t.*, ${total} as page_total, ${col(q.orderBy)} as page_k, t.id as page_kid
                from ${table(r)} t where ${cond} ${order}) t`
    : sql`select ${json} as json, ${total} as total, ${col(q.orderBy)} as page_k, t.id as page_kid
          from ${table(r)} t where ${cond} ${order}`;
  const page = await rows<{ json: string; total: number }>(exec, cutByBytes(selected, sql`page_k ${dir}, page_kid ${dir}`));
  let counted = page[0]?.total;
  if (counted === undefined) {
    // past the last page the count has no row to ride on
    const [c] = await rows<{ total: number }>(exec, sql`select ${total} as total`);
    counted = c?.total ?? 0;
  }
  return {
    records: page.map((p) => recordFromRowJson(r.record, p.json)),
    total: counted,
    shown: page.length,
    // short of what the limit and the total allow: the bytes cut it
    cut: page.length < Math.min(q.limit, counted - q.offset),
  };
}

/** What a list selects: scope (org, visibility, parent), the query's filters and its time range. */
function listConditions(r: Resource, caller: CallerContext, q: ListQuery, parentId: string | undefined): SQL[] {
  const where = scope(r, caller, parentId);
  for (const f of q.filters) where.push(sql`${col(f.field)} = ${f.value}${sql.raw(CAST[f.type]!)}`);
  if (q.labelPrefix !== undefined) {
    // the prefix is text, not a pattern: its own % _ and \ match themselves
    const pattern = `${q.labelPrefix.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
    where.push(
      sql`(${sql.join(
        r.labels.map((l) => sql`${col(l)} ilike ${pattern}`),
        sql` or `,
      )})`,
    );
  }
  if (r.rangeColumn && q.from) where.push(sql`${col(r.rangeColumn)} >= ${q.from}::timestamptz`);
  if (r.rangeColumn && q.to) where.push(sql`${col(r.rangeColumn)} < ${q.to}::timestamptz`);
  return where;
}

/**
 * A keyset position: where a page ended (the last record's created_at and id), or
 * a time alone, from which a read starts with the records created at or after it.
 */
export interface KeysetAfter {
  created_at: string;
  id?: string;
}

/**
 * One page of a whole list read by keyset (export jobs): the visible records
 * after `after` oldest first (created_at, then id: the order of the (org_id,
 * created_at, id) index of every top-level record table; sub-resources are read
 * under their parent, a short list sorted), cut by bytes like any page, and the
 * position to go on from (none once the list is read). No total, and no rows
 * skipped: a page costs what it holds, where an offset page counts the whole list
 * and fetches every row before its offset, so reading a large list by offset
 * grows with its square. One row more than the limit is read to tell whether
 * another page follows.
 */
export async function listRecordsByKeyset(
  exec: Executor,
  r: Resource,
  caller: CallerContext,
  q: ListQuery,
  parentId: string | undefined,
  after: KeysetAfter | undefined,
): Promise<{ records: records.Record[]; shown: number; next: KeysetAfter | undefined; cut: boolean }> {
  const where = listConditions(r, caller, q, parentId);
  if (after?.id) where.push(sql`(t.created_at, t.id) > (${after.created_at}::timestamptz, ${after.id}::uuid)`);
  else if (after) where.push(sql`t.created_at >= ${after.created_at}::timestamptz`);
  const fetched = await rows<{ json: string; k: string; kid: string; rows_in_reach: number }>(
    exec,
    cutByBytes(
      sql`select ${await render(exec, r)} as json, ${utcMicros(sql`t.created_at`)} as k, t.id as kid, t.created_at as kt
          from ${table(r)} t where ${sql.join(where, sql` and `)}
          order by t.created_at, t.id limit ${q.limit + 1}`,
      sql`kt, kid`,
      { rowsInReach: true },
    ),
  );
  const { shown, more, cut } = keysetPage(fetched, q.limit);
  const last = shown.at(-1);
  return {
    records: shown.map((p) => recordFromRowJson(r.record, p.json)),
    shown: shown.length,
    next: more && last ? { created_at: last.k, id: last.kid } : undefined,
    cut,
  };
}

export interface FindOptions {
  parentId?: string;
  /**
   * a row lock to the end of the transaction: `update` before deleting the row,
   * `no key update` before changing its other columns (it does not wait for, nor
   * block, rows being written that reference it), `key share` to keep it (and its
   * id) there for a row referencing it
   */
  lock?: 'update' | 'no key update' | 'key share';
  /** skip the visibility predicate (re-reading a row the caller just wrote) */
  allVisible?: boolean;
}

const ROW_LOCKS = {
  update: sql`for update of t`,
  'no key update': sql`for no key update of t`,
  'key share': sql`for key share of t`,
} as const;

/** A record of the caller's organisation visible to the caller, or null. */
export async function findRecord(exec: Executor, r: Resource, caller: CallerContext, id: string, opts: FindOptions = {}): Promise<StoredRecord | null> {
  if (!isGuid(id)) return null;
  const where = [sql`t.id = ${id}::uuid`, ...scope(r, caller, opts.parentId, opts.allVisible)];
  const [found] = await rows<{ json: string }>(
    exec,
    sql`${POINT_READ}select ${await render(exec, r)} as json from ${table(r)} t where ${sql.join(where, sql` and `)}
        ${opts.lock ? ROW_LOCKS[opts.lock] : sql``}`,
  );
  return found ? stored(r.record, found.json) : null;
}

/** The record or 404 (also when it exists in another organisation or is not visible). */
export async function getRecordOr404(exec: Executor, r: Resource, caller: CallerContext, id: string, opts: FindOptions = {}): Promise<StoredRecord> {
  const found = await findRecord(exec, r, caller, id, opts);
  if (!found) throw DomainError.notFound(`${r.name} record not found`);
  return found;
}

async function checkedColumns(tx: Tx, r: Resource, values: Record<string, unknown>): Promise<string[]> {
  const known = new Set(await tableColumns(tx, r));
  const keys = Object.keys(values).filter((k) => values[k] !== undefined);
  for (const k of keys) {
    if (!IDENT.test(k) || !known.has(k)) throw new Error(`resource ${r.name}: no column ${k} in ${r.table}`);
  }
  return keys;
}

/**
 * Inserts a record with engine-set id, org_id and created_by; returns it as
 * stored (rendered by RETURNING, so no second statement reads it back).
 */
export async function insertRecord(tx: Tx, r: Resource, caller: CallerContext, values: Record<string, unknown>): Promise<StoredRecord> {
  const id = newId();
  const known = await tableColumns(tx, r);
  const full: Record<string, unknown> = { ...values, id, org_id: caller.org_id };
  if (known.includes('created_by')) full.created_by = caller.user_id;
  const cols = sql.join(
    (await checkedColumns(tx, r, full)).map((c) => sql.identifier(c)),
    sql`, `,
  );
  const [row] = await rows<{ json: string }>(
    tx,
    sql`insert into ${table(r)} as t (${cols})
        select ${cols} from jsonb_populate_record(null::${table(r)}, ${JSON.stringify(full)}::jsonb)
        returning ${await render(tx, r)} as json`,
  );
  return stored(r.record, row!.json);
}

/**
 * Sets the given columns and updated_at of one record of the caller's
 * organisation; returns the record as stored, or null when there is none.
 */
export async function updateColumns(tx: Tx, r: Resource, caller: CallerContext, id: string, values: Record<string, unknown>): Promise<StoredRecord | null> {
  const keys = await checkedColumns(tx, r, values);
  const sets = keys.map((c) => sql`${sql.identifier(c)} = v.${sql.identifier(c)}`);
  sets.push(sql`updated_at = now()`);
  const [row] = await rows<{ json: string }>(
    tx,
    sql`update ${table(r)} t set ${sql.join(sets, sql`, `)}
        from jsonb_populate_record(null::${table(r)}, ${JSON.stringify(values)}::jsonb) v
        where t.id = ${id}::uuid and t.org_id = ${caller.org_id}::uuid
        returning ${await render(tx, r)} as json`,
  );
  return row ? stored(r.record, row.json) : null;
}

export async function deleteRow(tx: Tx, r: Resource, caller: CallerContext, id: string): Promise<void> {
  await tx.execute(sql`delete from ${table(r)} t where t.id = ${id}::uuid and t.org_id = ${caller.org_id}::uuid`);
}
