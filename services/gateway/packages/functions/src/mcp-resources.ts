import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import {
  CompleteRequestSchema,
  ErrorCode,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  McpError,
  ReadResourceRequestSchema,
  type Resource,
  type ResourceTemplate,
} from '@modelcontextprotocol/sdk/types.js';
import { jsonString, recordJson, recordsJson, type identity } from '@lab/contracts';
import { hasScope, RECORD_RESOURCES } from '@lab/http-api';
import { DomainError, isUuid, type CallerContext } from '@lab/kit';
import type { FunctionsHost } from './host.js';

/**
 * The records of the HTTP API's generic resources as MCP resources: one template
 * per kind (`lab://samples/{id}`...), read as the JSON GET /v1/<kind>/{id} answers
 * in `data`, listed page by page (cursor), and their ids completed from the start
 * of a record's name, title or display id. Everything reads through the same
 * RecordService calls as the REST routes, with the user's caller context, and
 * under the same rules: the `read` scope, the kind's module, the organisation of
 * the token, role, department and record rules. A record the caller may not see
 * reads exactly as one that does not exist.
 */
const SCHEME = 'lab';
const JSON_TYPE = 'application/json';
/** Resources per resources/list page: names only, so a page stays small. */
const LIST_PAGE = 50;
/** Completion values per answer (the MCP spec allows up to 100). */
const COMPLETIONS = 20;
/** The MCP spec's code for an unknown resource. */
const RESOURCE_NOT_FOUND = -32002;

interface Kind {
  resource: string;
  service: string;
  module?: string;
}

/** Top-level generic records that can be read one by one. */
const KINDS: Kind[] = RECORD_RESOURCES.filter((r) => !r.ops || r.ops.includes('get')).map((r) => ({
  resource: r.resource,
  service: r.service,
  ...(r.module ? { module: r.module } : {}),
}));

const templateOf = (k: Kind) => `${SCHEME}://${k.resource}/{id}`;
const uriOf = (k: Kind, id: string) => `${SCHEME}://${k.resource}/${id}`;

const notFound = (uri: string) => new McpError(RESOURCE_NOT_FOUND, 'Resource not found', { uri });

/** The kind and id a lab:// URI names, or undefined. */
function parseUri(uri: string): { kind: Kind; id: string } | undefined {
  const m = /^lab:\/\/([a-z-]+)\/([^/?#]+)$/.exec(uri);
  const kind = m && KINDS.find((k) => k.resource === m[1]);
  return kind ? { kind, id: m[2]! } : undefined;
}

/** A short name for a record: what people call it, else its id. */
function labelOf(rec: Record<string, unknown>): string {
  for (const key of ['name', 'title', 'display_id']) {
    const v = rec[key];
    if (typeof v === 'string' && v.length) return v;
  }
  return String(rec.id);
}

interface Cursor {
  /** index in KINDS */
  k: number;
  offset: number;
}

const encodeCursor = (c: Cursor) => Buffer.from(JSON.stringify(c)).toString('base64url');

function decodeCursor(cursor: string | undefined): Cursor {
  if (cursor === undefined) return { k: 0, offset: 0 };
  try {
    const c = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as Cursor;
    if (Number.isSafeInteger(c.k) && c.k >= 0 && c.k < KINDS.length && Number.isSafeInteger(c.offset) && c.offset >= 0) return c;
  } catch {
    // falls through to the error below
  }
  throw new McpError(ErrorCode.InvalidParams, 'invalid cursor');
}

/** Serves resources/templates/list, resources/list, resources/read and completion/complete on the server. */
export function serveRecordResources(mcp: McpServer, host: FunctionsHost, p: identity.Principal, caller: CallerContext): void {
  // the protocol's own handlers: McpServer's resource registry has one list for all templates, without cursors
  const server = mcp.server;
  // which kinds this caller may read here: the read scope, the kind's module and a deployment that serves it
  const readable = (k: Kind) => hasScope(p.scopes, 'read') && (!k.module || p.modules.includes(k.module)) && host.clients.has(k.service);
  const records = (k: Kind) => host.clients.records(k.service);

  /** Runs a record call; what the caller cannot see is not found, other domain refusals are invalid params. */
  async function reading<T>(uri: string, run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (err) {
      if (err instanceof DomainError && (err.kind === 'not_found' || err.kind === 'forbidden')) throw notFound(uri);
      if (err instanceof DomainError && err.kind !== 'internal' && err.kind !== 'unavailable')
        throw new McpError(ErrorCode.InvalidParams, `${err.code}: ${err.message}`);
      throw err;
    }
  }

  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: KINDS.filter(readable).map((k): ResourceTemplate => ({
      uriTemplate: templateOf(k),
      name: k.resource,
      title: `A record of ${k.resource}`,
      description: `One of ${k.resource} by id, as GET /v1/${k.resource}/{id} answers it (its data). Complete {id} from the start of its name.`,
      mimeType: JSON_TYPE,
    })),
  }));

  server.setRequestHandler(ReadResourceRequestSchema, async (req) => {
    const uri = req.params.uri;
    const named = parseUri(uri);
    if (!named || !isUuid(named.id)) throw notFound(uri);
    const { kind, id } = named;
    if (!hasScope(p.scopes, 'read')) throw new McpError(ErrorCode.InvalidRequest, 'insufficient_scope: the token lacks the read scope');
    // a kind of a module the organisation lacks, or of a service not deployed, holds nothing to read
    if (!readable(kind)) throw notFound(uri);
    const r = await reading(uri, () => records(kind).call('getRecord', { resource: kind.resource, id: id.toLowerCase(), parent_id: '' }, caller));
    return { contents: [{ uri, mimeType: JSON_TYPE, text: jsonString(recordJson(r.record!)) }] };
  });

  server.setRequestHandler(ListResourcesRequestSchema, async (req) => {
    let at = decodeCursor(req.params?.cursor);
    // kind after kind, newest first within each; a page holds the records of one kind
    for (; at.k < KINDS.length; at = { k: at.k + 1, offset: 0 }) {
      const kind = KINDS[at.k]!;
      if (!readable(kind)) continue;
      const r = await reading(`${SCHEME}://${kind.resource}`, () =>
        records(kind).call('listRecords', { resource: kind.resource, query: { limit: String(LIST_PAGE), offset: String(at.offset) }, parent_id: '' }, caller),
      );
      if (!r.records.length) continue;
      const recs = JSON.parse(jsonString(recordsJson(r.records))) as Record<string, unknown>[];
      const resources = recs.map((rec): Resource => ({ uri: uriOf(kind, String(rec.id)), name: labelOf(rec), mimeType: JSON_TYPE }));
      const next = at.offset + recs.length;
      const nextCursor =
        next < r.total ? encodeCursor({ k: at.k, offset: next }) : at.k + 1 < KINDS.length ? encodeCursor({ k: at.k + 1, offset: 0 }) : undefined;
      return { resources, ...(nextCursor ? { nextCursor } : {}) };
    }
    return { resources: [] };
  });

  server.setRequestHandler(CompleteRequestSchema, async (req) => {
    const { ref, argument } = req.params;
    if (ref.type !== 'ref/resource') throw new McpError(ErrorCode.InvalidParams, 'this server has no prompts; only resource templates are completed');
    const kind = KINDS.find((k) => templateOf(k) === ref.uri);
    if (!kind) throw new McpError(ErrorCode.InvalidParams, `no resource template ${ref.uri}`);
    const empty = { completion: { values: [], total: 0, hasMore: false } };
    if (argument.name !== 'id' || !readable(kind)) return empty;
    let r;
    try {
      r = await records(kind).call(
        'listRecords',
        { resource: kind.resource, query: { limit: String(COMPLETIONS), label_prefix: argument.value.slice(0, 200) }, parent_id: '' },
        caller,
      );
    } catch (err) {
      // a kind without names (stock movements) has nothing to complete from
      if (err instanceof DomainError && err.kind === 'invalid') return empty;
      throw err;
    }
    const ids = (JSON.parse(jsonString(recordsJson(r.records))) as { id: string }[]).map((rec) => rec.id);
    return { completion: { values: ids, total: r.total, hasMore: r.total > ids.length } };
  });
}
