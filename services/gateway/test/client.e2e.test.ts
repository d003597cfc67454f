/**
 * The integrator scenario of test/client/scenario.ts, typed by the client types
 * generated from the OpenAPI document, run for real through the gateway with
 * openapi-fetch: create a sample, page samples by keyset, consume stock of a
 * reagent, start a job and read it until it is done.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startStack, type Stack } from '@lab/testing';
import { generateClientTypes } from './client/generate';
import { checkerFor } from './openapi-responses';

let stack: Stack;
let artifactDir: string;
let token: string;

beforeAll(async () => {
  // the scenario's types come from the document as it is now
  await generateClientTypes();
  artifactDir = await mkdtemp(join(tmpdir(), 'lab-client-artifacts-'));
  process.env.JOBS_ARTIFACT_DIR = artifactDir;
  stack = await startStack({ services: ['identity', 'audit', 'notebook', 'inventory', 'notifications', 'jobs'] });
  const org = await stack.admin.createOrg({ rate_limit: { per_minute: 100_000, per_hour: 1_000_000 } });
  const user = await stack.admin.createUser();
  await stack.admin.putMember(org.id, user.id, 'admin');
  token = (await stack.admin.createApiKey(org.id, { scopes: ['read', 'write'], user_id: user.id })).token;
}, 120_000);

afterAll(async () => {
  await stack?.stop();
  delete process.env.JOBS_ARTIFACT_DIR;
  if (artifactDir) await rm(artifactDir, { recursive: true, force: true });
});

it('runs the typed client scenario against the gateway', async () => {
  const { scenario } = await import('./client/scenario');
  const done = new Set(['succeeded', 'failed', 'dead']);
  // every answer the client gets is checked against the document, as call() does
  const checked = async (request: Request): Promise<Response> => {
    const res = await fetch(request);
    const text = await res.clone().text();
    checkerFor(stack.url).check({
      method: request.method,
      path: new URL(request.url).pathname,
      status: res.status,
      contentType: res.headers.get('content-type'),
      text,
    });
    return res;
  };
  const result = await scenario(stack.url, token, (job) => done.has(job.status), checked);
  expect(result.sample).toMatchObject({ name: 'client sample', type: 'serum', metadata: { tube: 'A1' } });
  expect(result.samplesSeen).toBeGreaterThanOrEqual(1);
  expect(result.movement).toMatchObject({ movement_type: 'consume', quantity_delta: -2.5, quantity_after: 7.5, unit: 'ml' });
  expect(result.job).toMatchObject({ job_type: 'risk_assessment_pdf', status: 'succeeded', progress: 100 });
  expect(result.job.result_meta).toMatchObject({ content_type: 'application/pdf' });
}, 120_000);
