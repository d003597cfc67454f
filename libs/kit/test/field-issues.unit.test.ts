import { z } from 'zod';
import { DomainError, fieldIssues, parseWith } from '../src';

const schema = z
  .object({
    name: z.string().min(1).max(5),
    ref: z.guid('must be a UUID'),
    id: z.string().refine((v) => v.startsWith('x'), 'must start with x'),
    count: z.number().int().min(1).max(10),
    kind: z.enum(['a', 'b']),
    tags: z.array(z.string()).min(1),
    email: z.email().optional(),
  })
  .strict();

function issuesOf(input: unknown) {
  try {
    parseWith(schema, input);
  } catch (err) {
    expect(err).toBeInstanceOf(DomainError);
    return ((err as DomainError).details as { fields: { path: string; message: string }[] }).fields;
  }
  throw new Error('parsed');
}

describe('one formatter of validation problems', () => {
  it('says a missing field "is required", whatever check comes next (a UUID, a refinement, a type)', () => {
    const fields = issuesOf({});
    for (const path of ['name', 'ref', 'id', 'count', 'kind', 'tags']) {
      expect(fields).toContainEqual({ path, message: 'is required' });
    }
    expect(fields.map((f) => f.message).join(' ')).not.toMatch(/Invalid input|received undefined|must be a UUID/);
  });

  it('names an unknown key by its own path, never the body with zod’s text', () => {
    const fields = issuesOf({ name: 'n', ref: '0190a0c8-0000-7000-8000-000000000001', id: 'x', count: 1, kind: 'a', tags: ['t'], event: 'x' });
    expect(fields).toEqual([{ path: 'event', message: 'unknown or read-only field' }]);
  });

  it('puts wrong values in plain words and keeps the messages schemas wrote', () => {
    const fields = issuesOf({ name: '', ref: 'nope', id: 'y', count: 1.5, kind: 'c', tags: [], email: 'not-mail' });
    expect(fields).toEqual(
      expect.arrayContaining([
        { path: 'name', message: 'must not be empty' },
        { path: 'ref', message: 'must be a UUID' },
        { path: 'id', message: 'must start with x' },
        { path: 'count', message: 'must be an integer' },
        { path: 'kind', message: 'must be one of: a, b' },
        { path: 'tags', message: 'must have at least one item' },
        { path: 'email', message: 'must be an email address' },
      ]),
    );
    expect(issuesOf({ name: 'toolong', ref: 1, id: 'x', count: 11, kind: 'a', tags: ['t'] })).toEqual(
      expect.arrayContaining([
        { path: 'name', message: 'must be at most 5 characters long' },
        { path: 'ref', message: 'must be a UUID' },
        { path: 'count', message: 'must be at most 10' },
      ]),
    );
  });

  it('works from a ZodError parsed without the input reported too', () => {
    const r = z.object({ a: z.string() }).safeParse({});
    expect(r.success).toBe(false);
    expect(fieldIssues(r.error!)).toEqual([{ path: 'a', message: 'is required' }]);
  });
});
