import { z } from 'zod';
import { DomainError, parseJsonObject, parseWith } from '@lab/kit';
import { defineResource, parseListQuery } from '@lab/records';

const things = defineResource({
  name: 'things',
  table: 'kit.things',
  create: z.strictObject({ name: z.string() }),
  update: z.strictObject({ name: z.string().optional() }),
  filters: { owner_id: 'uuid', status: 'string', due_on: 'date', active: 'boolean' },
  orderBy: ['name'],
});

function failure(fn: () => unknown): DomainError {
  try {
    fn();
  } catch (err) {
    if (err instanceof DomainError) return err;
    throw err;
  }
  throw new Error('expected a DomainError');
}

describe('parseListQuery', () => {
  it('defaults to limit 50, offset 0, newest first', () => {
    expect(parseListQuery({}, things)).toEqual({ limit: 50, offset: 0, orderBy: 'created_at', order: 'desc', filters: [] });
  });

  it.each([
    ['1', 1],
    ['500', 500],
    ['73', 73],
  ])('accepts limit %s', (limit, expected) => {
    expect(parseListQuery({ limit }, things).limit).toBe(expected);
  });

  it.each(['0', '501', '-1', 'abc', '1.5', ''])('rejects limit %p with validation_failed on field limit', (limit) => {
    const err = failure(() => parseListQuery({ limit }, things));
    expect(err.kind).toBe('invalid');
    expect(err.code).toBe('validation_failed');
    expect(err.details).toMatchObject({ field: 'limit' });
  });

  it('accepts offset 0 and above, rejects negative offsets', () => {
    expect(parseListQuery({ offset: '0' }, things).offset).toBe(0);
    expect(parseListQuery({ offset: '1200' }, things).offset).toBe(1200);
    expect(failure(() => parseListQuery({ offset: '-5' }, things)).details).toMatchObject({ field: 'offset' });
  });

  it('takes label_prefix only for a resource with labels, as text of at most 200 characters', () => {
    const named = defineResource({
      name: 'named',
      table: 'kit.named',
      create: z.strictObject({ name: z.string() }),
      update: z.strictObject({ name: z.string().optional() }),
      labels: ['name'],
    });
    expect(parseListQuery({ label_prefix: 'Buf%' }, named).labelPrefix).toBe('Buf%');
    expect(failure(() => parseListQuery({ label_prefix: 'x'.repeat(201) }, named)).details).toMatchObject({ field: 'label_prefix' });
    expect(failure(() => parseListQuery({ label_prefix: 'Buf' }, things)).details).toMatchObject({ field: 'label_prefix' });
  });

  it('orders by allowlisted columns only, asc or desc', () => {
    expect(parseListQuery({ order_by: 'name', order: 'ASC' }, things)).toMatchObject({ orderBy: 'name', order: 'asc' });
    expect(failure(() => parseListQuery({ order_by: 'secret' }, things)).details).toMatchObject({ field: 'order_by' });
    expect(failure(() => parseListQuery({ order: 'sideways' }, things)).details).toMatchObject({ field: 'order' });
  });

  it('parses allowlisted filters by type', () => {
    const q = parseListQuery({ owner_id: '0190F5A0-1111-7ABC-8DEF-000000000001', status: 'open', due_on: '2024-02-29', active: 'TRUE' }, things);
    expect(q.filters).toEqual([
      { field: 'owner_id', type: 'uuid', value: '0190f5a0-1111-7abc-8def-000000000001' },
      { field: 'status', type: 'string', value: 'open' },
      { field: 'due_on', type: 'date', value: '2024-02-29' },
      { field: 'active', type: 'boolean', value: 'true' },
    ]);
  });

  it.each([
    ['owner_id', 'not-a-uuid'],
    ['due_on', '2023-02-29'],
    ['due_on', '29.02.2024'],
    ['active', 'yes'],
    ['status', 'a\0b'],
  ])('rejects filter %s=%s naming the field', (field, value) => {
    expect(failure(() => parseListQuery({ [field]: value }, things)).details).toMatchObject({ field });
  });

  it('rejects query keys that are not allowlisted', () => {
    const err = failure(() => parseListQuery({ org: 'x', name: 'y' }, things));
    expect(err.code).toBe('validation_failed');
    expect(err.details).toMatchObject({ field: 'org' });
    expect(failure(() => parseListQuery({ from: '2024-01-01T00:00:00Z' }, things)).details).toMatchObject({ field: 'from' });
  });

  it('ignores org_id, which selected the organisation at the gateway', () => {
    expect(parseListQuery({ org_id: '0190f5a0-1111-7abc-8def-000000000001' }, things).filters).toEqual([]);
  });

  it('uses the resource limits and range column of sub-resources', () => {
    const usage = defineResource({
      name: 'usage',
      table: 'kit.usage',
      create: z.strictObject({}),
      update: z.strictObject({}),
      limits: { default: 100, max: 500 },
      rangeColumn: 'started_at',
    });
    expect(parseListQuery({ from: '2024-01-01T00:00:00Z' }, usage)).toMatchObject({ limit: 100, from: '2024-01-01T00:00:00Z' });
    expect(failure(() => parseListQuery({ to: 'yesterday' }, usage)).details).toMatchObject({ field: 'to' });
  });
});

describe('defineResource', () => {
  it('refuses identifiers that could not be put into SQL safely', () => {
    const base = { create: z.strictObject({}), update: z.strictObject({}) };
    expect(() => defineResource({ ...base, name: 'x', table: 'things' })).toThrow(/schema.table/);
    expect(() => defineResource({ ...base, name: 'x', table: 'kit.things', orderBy: ['name; drop'] })).toThrow(/column/);
  });
});

describe('parseWith', () => {
  const update = z.strictObject({ title: z.string().max(5).optional(), tags: z.array(z.string()).optional() });

  it('names every unknown field', () => {
    const err = failure(() => parseWith(update, { signed_at: 'now', display_id: 'EXP-1' }));
    expect(err.code).toBe('validation_failed');
    expect(err.details).toEqual({
      field: 'signed_at',
      fields: [
        { path: 'signed_at', message: 'unknown or read-only field' },
        { path: 'display_id', message: 'unknown or read-only field' },
      ],
    });
  });

  it('gives the path of a nested bad value', () => {
    expect(failure(() => parseWith(update, { tags: ['a', 3] })).details).toMatchObject({ field: 'tags.1' });
  });
});

describe('parseJsonObject', () => {
  it.each([['{nope'], ['[1]'], ['null'], ['"text"']])('rejects %s as a body', (text) => {
    expect(failure(() => parseJsonObject(text))).toMatchObject({ code: 'validation_failed', details: { field: '', fields: [{ path: '' }] } });
  });

  it.each([
    ['{"name":"a\\u0000b"}', 'name'],
    ['{"metadata":{"k":["x","\\ud800"]}}', 'metadata.k.1'],
    ['{"\\udc00":1}', '\udc00'],
  ])('rejects text PostgreSQL cannot store in %s, naming %s', (text, field) => {
    expect(failure(() => parseJsonObject(text))).toMatchObject({ code: 'validation_failed', details: { field } });
  });

  it('refuses nesting past the limit without overflowing the stack', () => {
    const deep = `{"a":${'['.repeat(100_000)}${']'.repeat(100_000)}}`;
    expect(failure(() => parseJsonObject(deep))).toMatchObject({ code: 'validation_failed', details: { field: '' } });
  });

  it('returns the object', () => {
    expect(parseJsonObject('{"name":"a","n":[1,{"x":null}]}')).toEqual({ name: 'a', n: [1, { x: null }] });
  });
});
