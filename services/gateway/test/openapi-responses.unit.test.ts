import { randomUUID } from 'node:crypto';
import { checkerFor } from './openapi-responses';

/** The check every end-to-end answer goes through can fail, and fails for each kind of mismatch. */
const checker = checkerFor('http://gateway.test');
const json = 'application/json; charset=utf-8';
const now = '2026-11-26T10:00:00.123456+00:00';
const sample = {
  id: randomUUID(),
  created_by: null,
  created_at: now,
  updated_at: now,
  name: 's',
  type: null,
  status: 'registered',
  metadata: {},
  storage_location: null,
  storage_location_id: null,
  department_id: null,
  owner_id: null,
};
const answer = (status: number, body: unknown, contentType: string | null = json) => ({
  status,
  contentType,
  text: body === undefined ? '' : JSON.stringify(body),
});

describe('answers checked against the OpenAPI document', () => {
  it('takes an answer as documented', () => {
    expect(checker.problems({ method: 'POST', path: '/v1/samples', ...answer(201, { data: sample }) })).toEqual([]);
    expect(
      checker.problems({ method: 'GET', path: `/v1/samples/${sample.id}`, ...answer(404, { error: { code: 'not_found', message: 'record not found' } }) }),
    ).toEqual([]);
    expect(checker.problems({ method: 'DELETE', path: `/v1/samples/${sample.id}`, ...answer(204, undefined, null) })).toEqual([]);
    expect(checker.problems({ method: 'GET', path: '/v1/nothing-here', ...answer(404, { error: { code: 'not_found', message: 'no route' } }) })).toEqual([]);
  });

  it('refuses a body that is not the schema of its status', () => {
    const { type: _type, ...withoutType } = sample;
    expect(checker.problems({ method: 'POST', path: '/v1/samples', ...answer(201, { data: withoutType }) })).toEqual([
      expect.stringContaining("must have required property 'type'"),
    ]);
    expect(checker.problems({ method: 'POST', path: '/v1/samples', ...answer(201, { data: { ...sample, extra: 1 } }) })).toEqual([
      expect.stringContaining('additional properties'),
    ]);
    expect(checker.problems({ method: 'POST', path: '/v1/samples', ...answer(201, { data: { ...sample, created_at: 'yesterday' } }) })).toEqual([
      expect.stringContaining('format'),
    ]);
    expect(checker.problems({ method: 'GET', path: '/v1/samples/x', ...answer(404, { message: 'no envelope' }) })).toHaveLength(1);
  });

  it('refuses an undocumented status or content type, and a body where none is documented', () => {
    expect(checker.problems({ method: 'GET', path: '/v1/health', ...answer(418, { error: { code: 'teapot', message: 'x' } }) })).toEqual([
      expect.stringContaining('status 418 is not documented'),
    ]);
    expect(checker.problems({ method: 'POST', path: '/v1/samples', ...answer(201, { data: sample }, 'text/plain') })).toEqual([
      expect.stringContaining('content type text/plain'),
    ]);
    expect(checker.problems({ method: 'DELETE', path: `/v1/samples/${sample.id}`, ...answer(204, { data: sample }) })).toEqual([
      expect.stringContaining('a body where the document has none'),
    ]);
    expect(() => checker.check({ method: 'GET', path: '/v1/health', ...answer(418, {}) })).toThrow(/not as documented/);
  });
});
