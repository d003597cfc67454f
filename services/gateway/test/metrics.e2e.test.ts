import { once } from 'node:events';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { createMetricsServer } from '@lab/kit';
import { startStack, type Stack } from '@lab/testing';
import { call, eventually } from './http';

let stack: Stack;
let ops: Server;
let opsUrl: string;

/** Sum of the samples of one series whose labels include all of `labels`, from a /metrics scrape. */
async function scrape(name: string, labels: Record<string, string> = {}): Promise<number> {
  const text = await (await fetch(`${opsUrl}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ([^ ]+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const got = Object.fromEntries([...(m[2] ?? '').matchAll(/([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => got[k] === v)) sum += Number(m[3]);
  }
  return sum;
}

/**
 * The HTTP histogram is observed when the response has finished, which may be a
 * moment after the client has read it: wait for the expected value.
 */
const settles = (name: string, labels: Record<string, string>, expected: number) =>
  eventually(async () => ((await scrape(name, labels)) === expected ? true : undefined));

beforeAll(async () => {
  stack = await startStack();
  // The registry is per process: this server shows what the gateway in this process recorded.
  ops = createMetricsServer();
  ops.listen(0, '127.0.0.1');
  await once(ops, 'listening');
  opsUrl = `http://127.0.0.1:${(ops.address() as AddressInfo).port}`;
});

afterAll(async () => {
  ops?.close();
  await stack?.stop();
});

describe('gateway metrics', () => {
  it('serves the OpenAPI document without a token and records the request by route pattern and status', async () => {
    const labels = { method: 'GET', route: '/v1/openapi.json', status: '200' };
    const before = await scrape('lab_http_request_duration_seconds_count', labels);
    const res = await call(stack.url, 'GET', '/v1/openapi.json');
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ openapi: '3.1.0', info: { version: '1.1.0' } });
    await settles('lab_http_request_duration_seconds_count', labels, before + 1);
  });

  it('labels parameterised routes by their pattern, not the concrete path', async () => {
    const org = await stack.admin.createOrg();
    const key = (await stack.admin.createApiKey(org.id, { scopes: ['read'] })).token;
    const labels = { method: 'GET', route: '/v1/samples/:id', status: '404' };
    const before = await scrape('lab_http_request_duration_seconds_count', labels);
    const grpcBefore = await scrape('lab_grpc_server_duration_seconds_count', { service: 'notebook' });
    expect((await call(stack.url, 'GET', `/v1/samples/${randomUUID()}`, { token: key })).status).toBe(404);
    await settles('lab_http_request_duration_seconds_count', labels, before + 1);
    expect(await scrape('lab_grpc_server_duration_seconds_count', { service: 'notebook' })).toBeGreaterThan(grpcBefore);
  });

  it('counts idempotent replays', async () => {
    const org = await stack.admin.createOrg();
    const key = (await stack.admin.createApiKey(org.id, { scopes: ['write'] })).token;
    const before = await scrape('lab_idempotent_replays_total');
    const k = `metrics-${randomUUID()}`;
    const post = () => call(stack.url, 'POST', '/v1/samples', { token: key, body: { name: 'replayed' }, headers: { 'idempotency-key': k } });
    expect((await post()).status).toBe(201);
    expect(await scrape('lab_idempotent_replays_total')).toBe(before);
    const again = await post();
    expect(again.headers.get('idempotent-replay')).toBe('true');
    expect(await scrape('lab_idempotent_replays_total')).toBe(before + 1);
  });

  it('counts rate-limit rejections', async () => {
    const org = await stack.admin.createOrg({ rate_limit: { per_minute: 1, per_hour: 100 } });
    const key = (await stack.admin.createApiKey(org.id, { scopes: ['read'] })).token;
    const before = await scrape('lab_rate_limit_rejections_total');
    const rejectedBefore = await scrape('lab_http_request_duration_seconds_count', { route: '/v1/samples', status: '429' });
    expect((await call(stack.url, 'GET', '/v1/samples', { token: key })).status).toBe(200);
    expect((await call(stack.url, 'GET', '/v1/samples', { token: key })).status).toBe(429);
    expect(await scrape('lab_rate_limit_rejections_total')).toBe(before + 1);
    await settles('lab_http_request_duration_seconds_count', { route: '/v1/samples', status: '429' }, rejectedBefore + 1);
  });
});
