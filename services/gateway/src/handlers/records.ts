import { DomainError, isoTimestamp, isUuid } from '@lab/kit';
import { itemFromJson, listFromJson, noContent, type ListCursor, type Reply } from '../replies.js';
import { callerIn, type Ctx, type Deps } from '../request.js';
import type { RecordOp } from '../routes.js';

/** Query parameters that select the organisation rather than filter records. */
const NOT_FILTERS = new Set(['org_id']);

/** The query string as a flat map for the owning service, which validates it. */
export function queryMap(query: Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(query)) {
    if (NOT_FILTERS.has(k)) continue;
    if (typeof v !== 'string') {
      throw DomainError.invalid(`query parameter ${k} must be given once`, { fields: [{ path: k, message: 'must be given once' }] });
    }
    out[k] = v;
  }
  return out;
}

const SINCE_TIME = isoTimestamp();

/**
 * A list asked for by keyset (an addition to the spec, named as the audit log's
 * paging): since_created_at alone starts with the records created at or after
 * it, since_created_at with since_id goes on after that record (a page's
 * next_cursor). Both leave the query map; the owning service reads them as its
 * keyset position. Undefined for a list by offset.
 */
function keysetStart(query: Record<string, string>): string | undefined {
  const { since_created_at: time, since_id: id } = query;
  if (time === undefined && id === undefined) return undefined;
  delete query.since_created_at;
  delete query.since_id;
  const bad = (path: string, message: string) => DomainError.invalid(`${path} ${message}`, { fields: [{ path, message }] });
  if (time === undefined) throw bad('since_id', 'must be given with since_created_at');
  if (!SINCE_TIME.safeParse(time).success) throw bad('since_created_at', 'must be an ISO 8601 timestamp with offset');
  if (id === undefined) return time;
  if (!isUuid(id)) throw bad('since_id', 'must be a UUID');
  return `${time},${id.toLowerCase()}`;
}

/** A keyset page's next position as the API shows it; null once the list is read. */
function cursorOf(nextAfter: string | undefined): ListCursor | null {
  if (!nextAfter) return null;
  const at = nextAfter.lastIndexOf(',');
  return { since_created_at: nextAfter.slice(0, at), since_id: nextAfter.slice(at + 1) };
}

/** A body that must be a JSON object; no body at all counts as an empty one. */
export function objectBody(body: unknown): Record<string, unknown> {
  if (body === undefined) return {};
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw DomainError.invalid('request body must be a JSON object', { fields: [{ path: '', message: 'must be a JSON object' }] });
  }
  return body as Record<string, unknown>;
}

/**
 * A record id that is not a UUID cannot name a record of this organisation, so it
 * is answered like any other unknown id: 404.
 */
export function recordId(params: Record<string, string>, name = 'id'): string {
  const id = params[name];
  if (!id || !isUuid(id)) throw DomainError.notFound('record not found');
  return id.toLowerCase();
}

/**
 * Where a record sits: its parent (nested records: the path's :id, checked
 * like any id) and its own id (:sub_id of a nested record; none for the one
 * record of a parent, which the owning service finds by the parent).
 */
function address(ctx: Ctx, nested: 'many' | 'one' | undefined): { parent_id: string; id: () => string } {
  if (!nested) return { parent_id: '', id: () => recordId(ctx.params) };
  const parent_id = recordId(ctx.params);
  return { parent_id, id: () => (nested === 'one' ? '' : recordId(ctx.params, 'sub_id')) };
}

/** Generic CRUD over lab.common.v1.RecordService of the resource's owner. */
export async function recordHandler(ctx: Ctx, deps: Deps, op: RecordOp, resource: string, nested?: 'many' | 'one'): Promise<Reply> {
  const service = ctx.route.service!;
  const client = deps.clients.records(service);
  const caller = callerIn(ctx);
  const { parent_id, id } = address(ctx, nested);
  switch (op) {
    case 'list': {
      const query = queryMap(ctx.req.query as Record<string, unknown>);
      const after = keysetStart(query);
      if (after !== undefined) {
        const r = await client.call('listRecords', { resource, query, parent_id, keyset: true, after }, caller);
        const reply = listFromJson(r.json, { limit: r.limit, offset: 0, total: null, next_cursor: cursorOf(r.next_after) });
        if (r.cut_by_size) reply.headers = { Warning: `299 - "page cut by size at ${r.limit} records; continue from next_cursor"` };
        return reply;
      }
      const r = await client.call('listRecords', { resource, query, parent_id }, caller);
      const reply = listFromJson(r.json, { limit: r.limit, offset: r.offset, total: r.total });
      if (r.cut_by_size) reply.headers = { Warning: `299 - "page cut by size at ${r.limit} records; continue at offset ${r.offset + r.limit}"` };
      return reply;
    }
    case 'get': {
      const r = await client.call('getRecord', { resource, id: id(), parent_id }, caller);
      return itemFromJson(200, r.json);
    }
    case 'create': {
      const json = JSON.stringify(objectBody(ctx.body));
      const r = await client.call('createRecord', { resource, json, parent_id }, caller);
      return itemFromJson(201, r.json);
    }
    case 'update':
    case 'replace': {
      const json = JSON.stringify(objectBody(ctx.body));
      const r = await client.call('updateRecord', { resource, id: id(), json, replace: op === 'replace', parent_id }, caller);
      return itemFromJson(200, r.json);
    }
    case 'delete': {
      await client.call('deleteRecord', { resource, id: id(), parent_id }, caller);
      return noContent();
    }
  }
}
