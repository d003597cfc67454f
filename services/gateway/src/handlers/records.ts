import { recordJson, recordsJson } from '@lab/contracts';
import type { records } from '@lab/contracts';
import { DomainError, isUuid, validationFailed } from '@lab/kit';
import { callerIn, type Ctx, type Deps } from '../request.js';
import { type RecordOp, itemFromJson, listFromJson, noContent, withLocation, type Reply } from '@lab/http-api';

/** Query parameters that select the organisation rather than filter records. */
const NOT_FILTERS = new Set(['org_id']);

/** The query string as a flat map for the owning service, which validates it. */
export function queryMap(query: Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(query)) {
    if (NOT_FILTERS.has(k)) continue;
    if (typeof v !== 'string') {
      throw validationFailed([{ path: k, message: 'must be given once' }], `query parameter ${k} must be given once`);
    }
    out[k] = v;
  }
  return out;
}

/**
 * A list asked for by keyset (an addition to the spec): since_created_at alone
 * starts with the records created at or after it, since_created_at with since_id
 * goes on after that record (a page's next_cursor). Both leave the query map and
 * travel as the records contract's keyset position, which the owning service
 * checks (400 naming these fields). Undefined for a list by offset.
 */
function keysetStart(query: Record<string, string>): { after_created_at?: string; after_id?: string } | undefined {
  const { since_created_at, since_id } = query;
  if (since_created_at === undefined && since_id === undefined) return undefined;
  delete query.since_created_at;
  delete query.since_id;
  return { after_created_at: since_created_at, after_id: since_id };
}

/** A body that must be a JSON object; no body at all counts as an empty one. */
export function objectBody(body: unknown): Record<string, unknown> {
  if (body === undefined) return {};
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw validationFailed([{ path: '', message: 'must be a JSON object' }], 'request body must be a JSON object');
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

type RecordMessage = records.Record;

/** The id of a typed record, whatever its resource. */
const idOfRecord = (record: RecordMessage): string => (record.kind?.value as { id?: string } | undefined)?.id ?? '';

/**
 * Generic CRUD over lab.common.v1.RecordService of the resource's owner: bodies
 * go on as given (the owner checks them), typed records come back as the JSON
 * the API has always answered (recordJson).
 */
export async function recordHandler(ctx: Ctx, deps: Deps, op: RecordOp, resource: string, nested?: 'many' | 'one'): Promise<Reply> {
  const service = ctx.route.service!;
  const client = deps.clients.records(service);
  const caller = callerIn(ctx);
  const { parent_id, id } = address(ctx, nested);
  switch (op) {
    case 'list': {
      const query = queryMap(ctx.req.query);
      const start = keysetStart(query);
      if (start) {
        const r = await client.call('listRecords', { resource, query, parent_id, keyset: true, ...start }, caller);
        const next = r.next_created_at && r.next_id ? { since_created_at: r.next_created_at, since_id: r.next_id } : null;
        const reply = listFromJson(recordsJson(r.records), { limit: r.limit, offset: 0, total: null, next_cursor: next });
        if (r.cut_by_size) reply.headers = { Warning: `299 - "page cut by size at ${r.limit} records; continue from next_cursor"` };
        return reply;
      }
      const r = await client.call('listRecords', { resource, query, parent_id }, caller);
      const reply = listFromJson(recordsJson(r.records), { limit: r.limit, offset: r.offset, total: r.total });
      if (r.cut_by_size) reply.headers = { Warning: `299 - "page cut by size at ${r.limit} records; continue at offset ${r.offset + r.limit}"` };
      return reply;
    }
    case 'get': {
      const r = await client.call('getRecord', { resource, id: id(), parent_id }, caller);
      return itemFromJson(200, recordJson(r.record!));
    }
    case 'create': {
      const r = await client.call('createRecord', { resource, body: objectBody(ctx.body), parent_id }, caller);
      // at its item path; the one record of a parent (the remote link) at the parent's path
      return withLocation(itemFromJson(201, recordJson(r.record!)), ctx.req.path, nested === 'one' ? undefined : idOfRecord(r.record!));
    }
    case 'update':
    case 'replace': {
      const r = await client.call('updateRecord', { resource, id: id(), body: objectBody(ctx.body), replace: op === 'replace', parent_id }, caller);
      return itemFromJson(200, recordJson(r.record!));
    }
    case 'delete': {
      await client.call('deleteRecord', { resource, id: id(), parent_id }, caller);
      return noContent();
    }
  }
}
