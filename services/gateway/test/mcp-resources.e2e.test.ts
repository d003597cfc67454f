import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { startStack, type Stack } from '@lab/testing';
import { call } from './http';
import { authorize, FN, token } from './oauth-flow';

/**
 * The records as MCP resources, read with the official SDK client: templates per
 * record kind, a record read as the HTTP API renders it, lists by cursor, ids
 * completed from names, all inside the caller's organisation, department rules
 * and scopes, with what the caller may not see answered as not found.
 */
const password = 'a long enough password';
const REDIRECT = 'http://localhost:9999/callback';
const RESOURCE_NOT_FOUND = -32002;

let stack: Stack;
let orgA: string;
let orgB: string;
let plainOrg: string;
let email: string;
let sessionToken: string;
/** an API key of orgA for the HTTP reads the resources are compared with */
let readKey: string;
const ids: Record<string, string> = {};

async function post(key: string, path: string, body: unknown): Promise<string> {
  const r = await call(stack.url, 'POST', path, { token: key, body });
  if (r.status !== 201) throw new Error(`${path}: ${r.status} ${r.text}`);
  return r.body.data.id as string;
}

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'notebook', 'equipment', 'audit'] });
  orgA = (await stack.admin.createOrg({ modules: ['lab_equipment'] })).id;
  orgB = (await stack.admin.createOrg({ modules: ['lab_equipment'] })).id;
  plainOrg = (await stack.admin.createOrg()).id;
  const u = await stack.admin.createUser({ password });
  email = u.email;
  for (const o of [orgA, orgB, plainOrg]) await stack.admin.putMember(o, u.id, 'researcher');
  const dept = await stack.admin.call<{ id: string }>('POST', `/orgs/${orgA}/departments`, { name: 'Other' }, 201);
  const keyA = (await stack.admin.createApiKey(orgA, { scopes: ['write'] })).token;
  ids.buffer = await post(keyA, '/v1/samples', { name: 'Buffer A' });
  ids.buffer2 = await post(keyA, '/v1/samples', { name: 'buffer B' });
  ids.plasma = await post(keyA, '/v1/samples', { name: 'Plasma' });
  ids.hidden = await post(keyA, '/v1/samples', { name: 'Buffer of another department', department_id: dept.id });
  ids.experiment = await post(keyA, '/v1/experiments', { title: 'Titration', status: 'draft' });
  ids.centrifuge = await post(keyA, '/v1/equipment', { name: 'Centrifuge' });
  const keyB = (await stack.admin.createApiKey(orgB, { scopes: ['write'] })).token;
  ids.bSample = await post(keyB, '/v1/samples', { name: 'Buffer of B' });
  readKey = (await stack.admin.createApiKey(orgA, { scopes: ['read'] })).token;
  sessionToken = (await call(stack.url, 'POST', '/auth/v1/token', { body: { grant_type: 'password', email, password } })).body.access_token;
});

afterAll(async () => {
  await stack?.stop();
});

async function connect(headers: Record<string, string>): Promise<Client> {
  const client = new Client({ name: 'e2e', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${stack.url}${FN}/mcp`), { requestInit: { headers } }));
  return client;
}
const inOrg = (org: string) => connect({ authorization: `Bearer ${sessionToken}`, 'x-org-id': org });

async function mcpError(work: Promise<unknown>): Promise<McpError> {
  const err = await work.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(err instanceof McpError)) throw new Error(`expected an MCP error, got ${String(err)}`);
  return err;
}

describe('in an organisation with every module', () => {
  let client: Client;
  beforeAll(async () => {
    client = await inOrg(orgA);
  });
  afterAll(async () => {
    await client?.close();
  });

  it('advertises resources and completions', () => {
    expect(client.getServerCapabilities()).toMatchObject({ tools: {}, resources: {}, completions: {} });
  });

  it('offers one template per record kind this deployment serves (no inventory here: no reagents)', async () => {
    const { resourceTemplates } = await client.listResourceTemplates();
    const templates = resourceTemplates.map((t) => t.uriTemplate);
    expect(templates).toEqual(['lab://experiments/{id}', 'lab://projects/{id}', 'lab://samples/{id}', 'lab://equipment/{id}']);
    expect(resourceTemplates.every((t) => t.mimeType === 'application/json')).toBe(true);
  });

  it.each([
    ['samples', 'buffer'],
    ['experiments', 'experiment'],
    ['equipment', 'centrifuge'],
  ])('reads a record of %s exactly as GET /v1 renders it', async (kind, name) => {
    const read = await client.readResource({ uri: `lab://${kind}/${ids[name]}` });
    expect(read.contents).toHaveLength(1);
    const content = read.contents[0] as { uri: string; mimeType: string; text: string };
    expect(content).toMatchObject({ uri: `lab://${kind}/${ids[name]}`, mimeType: 'application/json' });
    const http = await call(stack.url, 'GET', `/v1/${kind}/${ids[name]}`, { token: readKey });
    expect(http.status).toBe(200);
    expect(JSON.parse(content.text)).toEqual(http.body.data);
  });

  it('answers what the caller cannot see as not found: another department, another organisation, nothing at all', async () => {
    for (const uri of [
      `lab://samples/${ids.hidden}`,
      `lab://samples/${ids.bSample}`,
      `lab://experiments/${ids.buffer}`,
      'lab://samples/not-a-uuid',
      `lab://nothing/${ids.buffer}`,
    ]) {
      const err = await mcpError(client.readResource({ uri }));
      expect([uri, err.code]).toEqual([uri, RESOURCE_NOT_FOUND]);
    }
  });

  it('lists every visible record page by page, by cursor', async () => {
    const seen: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const page = await client.listResources(cursor ? { cursor } : {});
      seen.push(...page.resources.map((r) => r.uri));
      expect(page.resources.every((r) => r.mimeType === 'application/json' && r.name.length > 0)).toBe(true);
      cursor = page.nextCursor;
      pages++;
    } while (cursor && pages < 50);
    expect(pages).toBeGreaterThan(1);
    expect(seen.sort()).toEqual(
      [
        `lab://samples/${ids.buffer}`,
        `lab://samples/${ids.buffer2}`,
        `lab://samples/${ids.plasma}`,
        `lab://experiments/${ids.experiment}`,
        `lab://equipment/${ids.centrifuge}`,
      ].sort(),
    );
    const err = await mcpError(client.listResources({ cursor: 'garbage' }));
    expect(err.code).toBe(-32602);
  });

  it('completes record ids from the start of a name, ignoring case, among visible records only', async () => {
    const ref = { type: 'ref/resource' as const, uri: 'lab://samples/{id}' };
    const buf = await client.complete({ ref, argument: { name: 'id', value: 'BUF' } });
    expect(buf.completion.values.sort()).toEqual([ids.buffer, ids.buffer2].sort());
    expect(buf.completion).toMatchObject({ total: 2, hasMore: false });
    const none = await client.complete({ ref, argument: { name: 'id', value: '50%_' } });
    expect(none.completion.values).toEqual([]);
    // experiments by title or display id
    const byDisplay = await client.complete({ ref: { type: 'ref/resource', uri: 'lab://experiments/{id}' }, argument: { name: 'id', value: 'exp-' } });
    expect(byDisplay.completion.values).toEqual([ids.experiment]);
    const byTitle = await client.complete({ ref: { type: 'ref/resource', uri: 'lab://experiments/{id}' }, argument: { name: 'id', value: 'titr' } });
    expect(byTitle.completion.values).toEqual([ids.experiment]);
    const err = await mcpError(client.complete({ ref: { type: 'ref/prompt', name: 'x' }, argument: { name: 'a', value: '' } }));
    expect(err.code).toBe(-32602);
  });
});

describe('the organisation and scopes of the caller', () => {
  it('offers no equipment where the module is off, and reads none', async () => {
    const client = await inOrg(plainOrg);
    const { resourceTemplates } = await client.listResourceTemplates();
    expect(resourceTemplates.map((t) => t.uriTemplate)).not.toContain('lab://equipment/{id}');
    const err = await mcpError(client.readResource({ uri: `lab://equipment/${ids.centrifuge}` }));
    expect(err.code).toBe(RESOURCE_NOT_FOUND);
    await client.close();
  });

  it('reads nothing with a token without the read scope (write would imply it)', async () => {
    const c = await stack.admin.call<{ client_id: string; client_secret: string }>(
      'POST',
      '/oauth-clients',
      { name: 'device registrar', redirect_uris: [REDIRECT], scopes: ['devices:register'] },
      201,
    );
    const loc = await authorize(stack.url, { client_id: c.client_id, redirect_uri: REDIRECT, scope: 'devices:register' }, { email, password }, orgA);
    const t = await token(stack.url, c, { grant_type: 'authorization_code', code: loc.searchParams.get('code')!, redirect_uri: REDIRECT });
    const client = await connect({ authorization: `Bearer ${t.body.access_token}` });
    expect((await client.listResourceTemplates()).resourceTemplates).toEqual([]);
    expect((await client.listResources()).resources).toEqual([]);
    const err = await mcpError(client.readResource({ uri: `lab://samples/${ids.buffer}` }));
    expect(err.message).toContain('insufficient_scope');
    await client.close();
  });
});
