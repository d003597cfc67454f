/**
 * Reads of records by id from several callers at once, through the gateway: the
 * reads one turn of the gateway brings in go to the notebook in batches (one per
 * caller, decision 042), and each request still gets its own answer: its own
 * record, a 404 for another organisation's record or an unknown id, never another
 * caller's view.
 */
import { randomUUID } from 'node:crypto';
import { metrics } from '@lab/kit';
import { startStack, type Stack } from '@lab/testing';
import { call, eventually } from './http';

let stack: Stack;
const callers: { token: string; samples: { id: string; name: string }[] }[] = [];

beforeAll(async () => {
  stack = await startStack();
  for (const org of ['A', 'B']) {
    const orgId = (await stack.admin.createOrg()).id;
    const { token } = await stack.admin.createApiKey(orgId, { scopes: ['*'] });
    const samples = [];
    for (let i = 0; i < 6; i++) {
      const r = await call(stack.url, 'POST', '/v1/samples', { token, body: { name: `${org} sample ${i}`, type: 'blood' } });
      expect(r.status).toBe(201);
      samples.push({ id: r.body.data.id as string, name: `${org} sample ${i}` });
    }
    callers.push({ token, samples });
  }
});

afterAll(async () => {
  await stack?.stop();
});

const batchedCalls = async () => (await metrics().batchedCalls.get()).values.filter((v) => v.labels.peer === 'notebook').reduce((n, v) => n + v.value, 0);

describe('reads of records by id in batches', () => {
  it('answers each concurrent read as alone: own records 200, another organisation’s and unknown ids 404', async () => {
    const before = await batchedCalls();
    const [a, b] = callers as [(typeof callers)[number], (typeof callers)[number]];
    // The burst is sent until the gateway has batched some of it (whether requests
    // meet in one turn is up to the network); every burst's answers are checked.
    await eventually(
      async () => {
        const reads = [
          ...[a, b].flatMap((own) => own.samples.map((s) => ({ token: own.token, id: s.id, expect: s.name }))),
          ...a.samples.map((s) => ({ token: b.token, id: s.id, expect: undefined })),
          ...b.samples.map((s) => ({ token: a.token, id: s.id, expect: undefined })),
          { token: a.token, id: randomUUID(), expect: undefined },
          { token: b.token, id: 'not-a-uuid', expect: undefined },
        ];
        const answers = await Promise.all(reads.map((r) => call(stack.url, 'GET', `/v1/samples/${r.id}`, { token: r.token })));
        answers.forEach((res, i) => {
          const read = reads[i]!;
          if (read.expect) {
            expect(res.status).toBe(200);
            expect(res.body.data).toMatchObject({ id: read.id, name: read.expect });
          } else {
            expect(res.status).toBe(404);
            expect(res.body.error.code).toBe('not_found');
            expect(res.text).not.toContain('sample ');
          }
        });
        return (await batchedCalls()) > before ? true : undefined;
      },
      30_000,
      'reads sent in batches',
    );
  });
});
