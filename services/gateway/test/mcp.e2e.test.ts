import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { startStack, type Stack } from '@lab/testing';
import { call } from './http';
import { authorize, FN, token } from './oauth-flow';

const REDIRECT = 'http://localhost:9999/callback';
const password = 'a long enough password';

let stack: Stack;
let orgA: string;
let orgB: string;
let plainOrg: string;
let user: { id: string; email: string };
let oauthToken: string;
let sessionToken: string;
/** titles/names per org, to tell which org a record came from */
const mark = { a: `A-${Date.now()}`, b: `B-${Date.now()}` };

async function seed(org: string, tag: string, departmentId?: string): Promise<void> {
  const key = (await stack.admin.createApiKey(org, { scopes: ['write'] })).token;
  const post = async (path: string, body: unknown) => {
    const r = await call(stack.url, 'POST', path, { token: key, body });
    if (r.status !== 201) throw new Error(`${path}: ${r.status} ${r.text}`);
  };
  await post('/v1/experiments', { title: `${tag} experiment`, status: 'draft' });
  await post('/v1/experiments', { title: `${tag} running`, status: 'running' });
  await post('/v1/samples', { name: `${tag} sample` });
  if (departmentId) await post('/v1/samples', { name: `${tag} other department sample`, department_id: departmentId });
  await post('/v1/equipment', { name: `${tag} centrifuge` });
}

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'notebook', 'equipment', 'audit'] });
  orgA = (await stack.admin.createOrg({ modules: ['lab_equipment'] })).id;
  orgB = (await stack.admin.createOrg({ modules: ['lab_equipment'] })).id;
  plainOrg = (await stack.admin.createOrg()).id;
  const u = await stack.admin.createUser({ password, name: 'Mia' });
  user = { id: u.id, email: u.email };
  for (const o of [orgA, orgB, plainOrg]) await stack.admin.putMember(o, u.id, 'researcher');
  const dept = await stack.admin.call<{ id: string }>('POST', `/orgs/${orgA}/departments`, { name: 'Other' }, 201);
  await seed(orgA, mark.a, dept.id);
  await seed(orgB, mark.b);

  const client = await stack.admin.call<{ client_id: string; client_secret: string }>(
    'POST',
    '/oauth-clients',
    { name: 'agent', redirect_uris: [REDIRECT] },
    201,
  );
  const loc = await authorize(stack.url, { client_id: client.client_id, redirect_uri: REDIRECT, scope: 'read' }, { email: u.email, password }, orgA);
  const t = await token(stack.url, client, { grant_type: 'authorization_code', code: loc.searchParams.get('code')!, redirect_uri: REDIRECT });
  oauthToken = t.body.access_token;
  sessionToken = (await call(stack.url, 'POST', '/auth/v1/token', { body: { grant_type: 'password', email: u.email, password } })).body.access_token;
});

afterAll(async () => {
  await stack?.stop();
});

async function connect(headers: Record<string, string>): Promise<Client> {
  const client = new Client({ name: 'e2e', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${stack.url}${FN}/mcp`), { requestInit: { headers } }));
  return client;
}

/** The JSON a tool answered, or its error text. */
async function tool(client: Client, name: string, args: Record<string, unknown> = {}): Promise<{ isError: boolean; value: any }> {
  const r = (await client.callTool({ name, arguments: args })) as { isError?: boolean; content: { type: string; text: string }[] };
  const text = r.content[0]!.text;
  return { isError: r.isError === true, value: r.isError ? text : JSON.parse(text) };
}

const names = (v: { data: { title?: string; name?: string }[] }) => v.data.map((r) => r.title ?? r.name).sort();

describe('MCP function with an OAuth access token', () => {
  let client: Client;
  beforeAll(async () => {
    client = await connect({ authorization: `Bearer ${oauthToken}` });
  });
  afterAll(async () => {
    await client?.close();
  });

  it('lists exactly the four read-only tools, each with an input schema', async () => {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(['list_equipment', 'list_experiments', 'list_samples', 'whoami']);
    for (const t of tools) {
      expect(t.inputSchema.type).toBe('object');
      expect(t.annotations?.readOnlyHint).toBe(true);
    }
    const experiments = tools.find((t) => t.name === 'list_experiments')!;
    expect(Object.keys(experiments.inputSchema.properties ?? {}).sort()).toEqual(['limit', 'offset', 'project_id', 'status']);
  });

  it('whoami names the user and the organisation of the grant', async () => {
    const r = await tool(client, 'whoami');
    expect(r.value).toMatchObject({ user_id: user.id, email: user.email, org_id: orgA, role: 'researcher', token_kind: 'oauth', scopes: ['read'] });
  });

  it("lists only the granted organisation's records, permission-filtered", async () => {
    expect(names((await tool(client, 'list_experiments')).value)).toEqual([`${mark.a} experiment`, `${mark.a} running`]);
    // the sample of another department is not visible to a researcher outside it
    expect(names((await tool(client, 'list_samples')).value)).toEqual([`${mark.a} sample`]);
    expect(names((await tool(client, 'list_equipment')).value)).toEqual([`${mark.a} centrifuge`]);
  });

  it('applies filters and paging', async () => {
    const running = await tool(client, 'list_experiments', { status: 'running' });
    expect(names(running.value)).toEqual([`${mark.a} running`]);
    const paged = await tool(client, 'list_experiments', { limit: 1, offset: 1 });
    expect(paged.value.data).toHaveLength(1);
    expect(paged.value.pagination).toEqual({ limit: 1, offset: 1, total: 2 });
  });

  it('refuses arguments outside the input schema', async () => {
    const r = await tool(client, 'list_samples', { limit: 1000 });
    expect(r.isError).toBe(true);
  });
});

describe('MCP function with a sign-in access token', () => {
  it('acts in the organisation of X-Org-Id', async () => {
    const client = await connect({ authorization: `Bearer ${sessionToken}`, 'x-org-id': orgB });
    try {
      expect((await tool(client, 'whoami')).value).toMatchObject({ org_id: orgB, token_kind: 'session' });
      expect(names((await tool(client, 'list_samples')).value)).toEqual([`${mark.b} sample`]);
    } finally {
      await client.close();
    }
  });

  it("acts in the user's only organisation when the client sends the bearer token alone", async () => {
    const email = `solo-${Date.now()}@example.test`;
    const solo = await stack.admin.createUser({ email, password, name: 'Solo' });
    await stack.admin.putMember(orgB, solo.id, 'researcher');
    const soloToken = (await call(stack.url, 'POST', '/auth/v1/token', { body: { grant_type: 'password', email, password } })).body.access_token;
    const client = await connect({ authorization: `Bearer ${soloToken}` });
    try {
      expect((await tool(client, 'whoami')).value).toMatchObject({ user_id: solo.id, org_id: orgB, token_kind: 'session' });
      expect(names((await tool(client, 'list_samples')).value)).toEqual([`${mark.b} sample`]);
    } finally {
      await client.close();
    }
  });

  it('with several organisations and no X-Org-Id, says how to choose and which there are', async () => {
    const res = await fetch(`${stack.url}${FN}/mcp`, {
      method: 'POST',
      headers: { authorization: `Bearer ${sessionToken}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { code: string; message: string; details: { organisations: { id: string }[] } } };
    expect(body.error.code).toBe('org_required');
    expect(body.error.message).toContain('X-Org-Id');
    expect(body.error.details.organisations.map((o) => o.id).sort()).toEqual([orgA, orgB, plainOrg].sort());
  });

  it('answers a tool error for list_equipment without the lab_equipment module', async () => {
    const client = await connect({ authorization: `Bearer ${sessionToken}`, 'x-org-id': plainOrg });
    try {
      const r = await tool(client, 'list_equipment');
      expect(r.isError).toBe(true);
      expect(r.value).toContain('module_not_enabled');
      expect((await tool(client, 'list_experiments')).value.data).toEqual([]);
    } finally {
      await client.close();
    }
  });
});

describe('MCP authentication', () => {
  const initialize = (headers: Record<string, string>) =>
    fetch(`${stack.url}${FN}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
      }),
    });
  const challenge = `Bearer resource_metadata="URL"`;

  it.each([
    ['an API key', async () => (await stack.admin.createApiKey(orgA, { scopes: ['read'] })).token],
    ['a PAT', async () => (await stack.admin.createPat(user.id, { scopes: ['read'], org_id: orgA })).token],
    ['no token', async () => undefined],
  ])('refuses %s with 401 and the resource metadata challenge', async (_n, make) => {
    const t = await make();
    const res = await initialize(t ? { authorization: `Bearer ${t}` } : {});
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toContain(challenge.replace('URL', `${stack.url}${FN}/.well-known/oauth-protected-resource`));
  });

  it('is refused by the SDK client with an API key', async () => {
    const key = (await stack.admin.createApiKey(orgA, { scopes: ['read'] })).token;
    await expect(connect({ authorization: `Bearer ${key}` })).rejects.toThrow();
  });

  it('serves the protected resource metadata (RFC 9728)', async () => {
    const r = await call(stack.url, 'GET', `${FN}/.well-known/oauth-protected-resource`);
    expect(r.status).toBe(200);
    expect(r.body).toEqual({
      resource: `${stack.url}${FN}/mcp`,
      authorization_servers: [`${stack.url}/auth/v1`],
      scopes_supported: ['read'],
      bearer_methods_supported: ['header'],
      resource_name: expect.any(String),
    });
  });

  it('answers 405 to GET (stateless: no server-initiated stream)', async () => {
    const res = await fetch(`${stack.url}${FN}/mcp`, { headers: { authorization: `Bearer ${oauthToken}` } });
    expect(res.status).toBe(405);
  });
});

describe('MCP request size', () => {
  const rpc = (body: unknown, headers: Record<string, string>) =>
    fetch(`${stack.url}${FN}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18', ...headers },
      body: JSON.stringify(body),
    });

  it('refuses a JSON-RPC batch with 400 in the JSON-RPC error shape, running none of it', async () => {
    const listCall = (id: number) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'list_samples', arguments: { limit: 100 } } });
    const res = await rpc([listCall(1), listCall(2), listCall(3)], { authorization: `Bearer ${sessionToken}`, 'x-org-id': orgA });
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await res.json()).toEqual({ jsonrpc: '2.0', error: { code: -32600, message: expect.stringMatching(/batch/i) }, id: null });
    // one message per request still works
    const one = await rpc(listCall(4), { authorization: `Bearer ${sessionToken}`, 'x-org-id': orgA });
    expect(one.status).toBe(200);
    expect(((await one.json()) as { id: number }).id).toBe(4);
  });

  it('cuts a list tool result to 1 MiB of whole records, with a note and a limit to page on from', async () => {
    const org = (await stack.admin.createOrg()).id;
    await stack.admin.putMember(org, user.id, 'researcher');
    const key = (await stack.admin.createApiKey(org, { scopes: ['write'] })).token;
    // three samples of ~400 KB: 1.2 MB in all, over the 1 MiB a tool answers
    for (let i = 0; i < 3; i++) {
      const r = await call(stack.url, 'POST', '/v1/samples', { token: key, body: { name: `big ${i}`, metadata: { blob: `${i}`.repeat(400_000) } } });
      expect(r.status).toBe(201);
    }
    const client = await connect({ authorization: `Bearer ${sessionToken}`, 'x-org-id': org });
    try {
      const raw = async (args: Record<string, unknown>) =>
        ((await client.callTool({ name: 'list_samples', arguments: args })) as { content: { text: string }[] }).content[0]!.text;
      const first = await raw({});
      expect(Buffer.byteLength(first)).toBeLessThanOrEqual(1024 * 1024 + 1024);
      const page = JSON.parse(first);
      expect(page.data).toHaveLength(2);
      expect(page.pagination).toEqual({ limit: 2, offset: 0, total: 3 });
      expect(page.note).toMatch(/truncated.*offset 2/);
      const rest = JSON.parse(await raw({ offset: Number(page.pagination.offset) + Number(page.pagination.limit) }));
      expect(rest.data).toHaveLength(1);
      expect(rest.note).toBeUndefined();
      expect([...page.data, ...rest.data].map((s: { name: string }) => s.name).sort()).toEqual(['big 0', 'big 1', 'big 2']);
    } finally {
      await client.close();
    }
  });
});
