import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { jsonString, recordsJson, type identity } from '@lab/contracts';
import { errorReply, hasScope, type Reply } from '@lab/http-api';
import { DomainError, type CallerContext } from '@lab/kit';
import type { FunctionRequest, FunctionsHost } from './host.js';
import { serveRecordResources } from './mcp-resources.js';
import { mcpResourceUrl, resourceMetadataUrl } from './metadata.js';

/**
 * The MCP function: four read-only tools, and the records as resources with
 * completion of their ids (mcp-resources.ts), over Streamable HTTP, stateless
 * (a fresh server and transport per request, JSON responses, no session id).
 * It acts as the signed-in user only (session or OAuth access token), and each
 * tool reads through the same RecordService calls as the REST lists, with the
 * user's caller context: role, department and record rules apply unchanged.
 */
const page = {
  limit: z.number().int().min(1).max(100).default(20).describe('records per page (1 to 100)'),
  offset: z.number().int().min(0).max(1_000_000).default(0).describe('records to skip'),
};
const uuid = z.uuid();
const text = z.string().min(1).max(200);

interface ListTool {
  name: string;
  title: string;
  service: string;
  resource: string;
  module?: string;
  filters: Record<string, z.ZodType<string>>;
}

const LIST_TOOLS: ListTool[] = [
  {
    name: 'list_experiments',
    title: 'Experiments (notebook entries) you can see',
    service: 'notebook',
    resource: 'experiments',
    filters: { status: text.describe('exact status, e.g. draft'), project_id: uuid.describe('only entries of this project') },
  },
  {
    name: 'list_samples',
    title: 'Samples you can see',
    service: 'notebook',
    resource: 'samples',
    filters: { status: text.describe('exact status, e.g. registered'), type: text.describe('exact sample type') },
  },
  {
    name: 'list_equipment',
    title: 'Equipment you can see (module lab_equipment)',
    service: 'equipment',
    resource: 'equipment',
    module: 'lab_equipment',
    filters: { status: text.describe('exact status'), location: text.describe('exact location') },
  },
];

/**
 * The most bytes of records one list tool answers. A records page may hold up to
 * 8 MiB (LIST_PAGE_BYTES, plus the record that crosses it); a tool's text goes to
 * a model whole, and every request of it is held in this process as one string.
 * A page over this keeps its first records that fit (at least one) and reports
 * how many it holds as its limit, as a page cut by its bytes does, so offset +
 * limit is where the next call starts; a note says so.
 */
const TOOL_RESULT_BYTES = 1024 * 1024;

const toolError = (message: string): CallToolResult => ({ isError: true, content: [{ type: 'text', text: message }] });
const toolJson = (jsonText: string): CallToolResult => ({ content: [{ type: 'text', text: jsonText }] });

/** Runs a tool body; domain failures become tool errors the model can read, not protocol errors. */
async function guarded(run: () => Promise<CallToolResult>): Promise<CallToolResult> {
  try {
    return await run();
  } catch (err) {
    if (err instanceof DomainError && err.kind !== 'internal') return toolError(`${err.code}: ${err.message}`);
    throw err;
  }
}

function buildServer(host: FunctionsHost, p: identity.Principal, caller: CallerContext): McpServer {
  const server = new McpServer({ name: 'lab-notebook', version: '1.0.0' }, { capabilities: { tools: {}, resources: {}, completions: {} } });
  serveRecordResources(server, host, p, caller);
  const readOnly = { readOnlyHint: true, openWorldHint: false };

  server.registerTool(
    'whoami',
    {
      title: 'Who am I',
      description: 'The signed-in user, the organisation the tools act in, role, scopes and enabled modules.',
      inputSchema: {},
      annotations: readOnly,
    },
    async () =>
      guarded(async () => {
        const u = await host.clients.identity().call('getUser', { user_id: p.user_id! }, caller);
        return toolJson(
          JSON.stringify({
            user_id: u.id,
            email: u.email,
            name: u.name ?? null,
            org_id: p.org_id,
            role: p.role ?? null,
            department_id: p.department_id ?? null,
            token_kind: p.token_kind,
            scopes: p.scopes,
            modules: p.modules,
          }),
        );
      }),
  );

  for (const t of LIST_TOOLS) {
    const filters = Object.fromEntries(Object.entries(t.filters).map(([k, s]) => [k, s.optional()]));
    server.registerTool(
      t.name,
      {
        title: t.title,
        description: `${t.title}, newest first, as {data, pagination}. Only records your role and department allow.`,
        inputSchema: { ...page, ...filters },
        annotations: readOnly,
      },
      async (args: Record<string, unknown>) =>
        guarded(async () => {
          if (!hasScope(p.scopes, 'read')) return toolError('insufficient_scope: the token lacks the read scope');
          if (t.module && !p.modules.includes(t.module)) return toolError(`module_not_enabled: the ${t.module} module is not enabled for this organisation`);
          if (!host.clients.has(t.service)) return toolError(`service_unavailable: ${t.resource} are not served by this deployment`);
          const query: Record<string, string> = {};
          // eslint-disable-next-line @typescript-eslint/no-base-to-string -- the tools' arguments are JSON scalars (their input schemas)
          for (const [k, v] of Object.entries(args)) if (v !== undefined) query[k] = String(v);
          const r = await host.clients.records(t.service).call('listRecords', { resource: t.resource, query, parent_id: '' }, caller);
          return toolJson(listText(jsonString(recordsJson(r.records)), { limit: r.limit, offset: r.offset, total: r.total }));
        }),
    );
  }
  return server;
}

/**
 * A list tool's text: {data, pagination}, with the page's records cut to
 * TOOL_RESULT_BYTES (whole records only) and a note when it was cut.
 */
function listText(recordsJson: string, pagination: { limit: number; offset: number; total: number }): string {
  if (Buffer.byteLength(recordsJson) <= TOOL_RESULT_BYTES) return `{"data":${recordsJson},"pagination":${JSON.stringify(pagination)}}`;
  const records = JSON.parse(recordsJson) as unknown[];
  const kept: string[] = [];
  let bytes = 2; // the brackets
  for (const rec of records) {
    const text = JSON.stringify(rec);
    const size = Buffer.byteLength(text) + (kept.length ? 1 : 0);
    if (kept.length && bytes + size > TOOL_RESULT_BYTES) break;
    kept.push(text);
    bytes += size;
  }
  const next = pagination.offset + kept.length;
  const note =
    `truncated: ${kept.length} of the page's ${records.length} records shown, to keep this result under ${TOOL_RESULT_BYTES / (1024 * 1024)} MiB; ` +
    `call again with offset ${next} for the rest`;
  return `{"data":[${kept.join(',')}],"pagination":${JSON.stringify({ ...pagination, limit: kept.length })},"note":${JSON.stringify(note)}}`;
}

/**
 * JSON-RPC batches are refused: the SDK would run up to 100 of their calls at
 * once, each list call holding up to a page of records (megabytes), all for one
 * counted request. Each call is a request of its own, counted like any other.
 * The answer has the shape of the SDK's own answers to bad requests.
 */
function batchRefused(): Reply {
  return {
    status: 400,
    contentType: 'application/json',
    body: JSON.stringify({
      jsonrpc: '2.0',
      error: { code: -32600, message: 'Invalid Request: batches are not supported; send one JSON-RPC message per request' },
      id: null,
    }),
  };
}

/** The 401 of the MCP authorization spec: where to find the protected resource metadata. */
function challenge(ctx: FunctionRequest, err: DomainError): Reply {
  const reply = errorReply(err);
  const desc = err.message.replace(/["\\]/g, '');
  return {
    ...reply,
    headers: {
      ...(reply.headers ?? {}),
      'WWW-Authenticate': `Bearer resource_metadata="${resourceMetadataUrl(ctx)}", error="invalid_token", error_description="${desc}"`,
    },
  };
}

/** POST /functions/v1/mcp. */
export async function mcpHandler(ctx: FunctionRequest, host: FunctionsHost): Promise<Reply> {
  let user: { principal: identity.Principal; caller: CallerContext };
  try {
    user = await host.authenticateUser(ctx, mcpResourceUrl(ctx));
  } catch (err) {
    if (err instanceof DomainError && err.kind === 'unauthenticated') return challenge(ctx, err);
    throw err;
  }
  if (Array.isArray(ctx.body)) return batchRefused();

  const server = buildServer(host, user.principal, user.caller);
  const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  await server.connect(transport);
  try {
    const headers = new Headers();
    for (const [k, v] of Object.entries(ctx.req.headers)) {
      if (typeof v === 'string') headers.set(k, v);
      else if (Array.isArray(v)) headers.set(k, v.join(', '));
    }
    const url = `${ctx.req.protocol}://${ctx.req.get('host') ?? 'localhost'}${ctx.req.originalUrl}`;
    const res = await transport.handleRequest(new Request(url, { method: ctx.req.method, headers }), { parsedBody: ctx.body });
    const body = await res.text();
    const out: Record<string, string> = {};
    res.headers.forEach((v, k) => {
      if (k !== 'content-type' && k !== 'content-length') out[k] = v;
    });
    return { status: res.status, headers: out, body: body.length ? body : undefined, contentType: res.headers.get('content-type') ?? undefined };
  } finally {
    await server.close();
  }
}
