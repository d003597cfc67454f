import { PgDialect } from 'drizzle-orm/pg-core';
import { DomainError, parseWith, type CallerContext } from '@lab/kit';
import { experiments } from '../src/experiments';
import { projects } from '../src/projects';
import { samples } from '../src/samples';
import { departmentAccess as recordAccess } from '@lab/records';

const USER = '0190f5a0-0000-7000-8000-000000000001';
const OTHER = '0190f5a0-0000-7000-8000-000000000002';
const DEPT = '0190f5a0-0000-7000-8000-0000000000d1';
const DEPT2 = '0190f5a0-0000-7000-8000-0000000000d2';

function details(fn: () => unknown): Record<string, unknown> | undefined {
  try {
    fn();
  } catch (err) {
    if (err instanceof DomainError && err.code === 'validation_failed') return err.details;
    throw err;
  }
  throw new Error('expected validation_failed');
}

describe('record schemas', () => {
  it('accepts the spec create bodies', () => {
    expect(
      parseWith(experiments.create, {
        title: 'PCR run',
        description: 'd',
        content: { blocks: [] },
        status: 'draft',
        tags: ['pcr'],
        project_id: USER,
        template_id: OTHER,
      }),
    ).toMatchObject({ title: 'PCR run', tags: ['pcr'] });
    expect(parseWith(projects.create, { name: 'P', start_date: '2024-05-01', parent_project_id: null })).toMatchObject({ name: 'P' });
    expect(parseWith(samples.create, { name: 'S1', metadata: { ph: 7 }, storage_location: 'Freezer 2' })).toMatchObject({ name: 'S1' });
    expect(parseWith(experiments.create, {})).toEqual({});
  });

  it('requires name on projects and samples', () => {
    expect(details(() => parseWith(projects.create, { description: 'x' }))).toMatchObject({ field: 'name' });
    expect(details(() => parseWith(samples.create, { name: '  ' }))).toMatchObject({ field: 'name' });
  });

  it('names the bad field with its path', () => {
    expect(details(() => parseWith(experiments.create, { project_id: 'nope' }))).toMatchObject({ field: 'project_id' });
    expect(details(() => parseWith(experiments.create, { content: [1, 2] }))).toMatchObject({ field: 'content' });
    expect(details(() => parseWith(projects.create, { name: 'p', start_date: '2024-13-01' }))).toMatchObject({ field: 'start_date' });
    expect(details(() => parseWith(samples.create, { name: 's', metadata: 'x' }))).toMatchObject({ field: 'metadata' });
    expect(details(() => parseWith(projects.update, { tags: ['ok', 7] }))).toMatchObject({ field: 'tags.1' });
  });

  it.each(['signed_at', 'signed_by', 'display_id', 'author_id', 'org_id', 'id', 'created_at', 'updated_at', 'created_by'])(
    'never lets a client write %s',
    (field) => {
      expect(details(() => parseWith(experiments.update, { [field]: null }))).toMatchObject({ field });
      expect(details(() => parseWith(experiments.create, { [field]: null }))).toMatchObject({ field });
    },
  );

  it('lets storage_location_id be written on samples and keeps update optional', () => {
    expect(parseWith(samples.update, { storage_location_id: USER })).toEqual({ storage_location_id: USER });
    expect(parseWith(projects.update, {})).toEqual({});
    expect(details(() => parseWith(projects.update, { name: null }))).toMatchObject({ field: 'name' });
  });
});

describe('record permissions', () => {
  const access = recordAccess(['author_id', 'created_by']);
  const caller = (over: Partial<CallerContext>): CallerContext => ({
    org_id: OTHER,
    user_id: USER,
    role: 'researcher',
    department_id: DEPT,
    scopes: ['read', 'write'],
    token_kind: 'api_key',
    token_id: null,
    request_id: 'r',
    ...over,
  });
  const render = (c: CallerContext) => {
    const where = access.canRead(c);
    return where ? new PgDialect().sqlToQuery(where).sql : undefined;
  };

  it('lets admin, qm and tokens without a user see every record', () => {
    expect(render(caller({ role: 'admin' }))).toBeUndefined();
    expect(render(caller({ role: 'qm' }))).toBeUndefined();
    expect(render(caller({ user_id: null, role: null }))).toBeUndefined();
  });

  it('limits other members to no department, their department and their own records', () => {
    expect(render(caller({}))).toBe('t.department_id is null or t.department_id = $1::uuid or t."author_id" = $2::uuid or t."created_by" = $3::uuid');
    expect(render(caller({ department_id: null, role: 'viewer' }))).toBe('t.department_id is null or t."author_id" = $1::uuid or t."created_by" = $2::uuid');
  });

  it.each([
    ['admin', { department_id: DEPT2 }, true],
    ['dept_admin', { department_id: null }, true],
    ['dept_admin', { department_id: DEPT }, true],
    ['dept_admin', { department_id: DEPT2, author_id: USER }, false],
    ['researcher', { department_id: DEPT2, author_id: USER }, true],
    ['researcher', { department_id: DEPT }, true],
    ['researcher', { department_id: null }, false],
    ['qm', { department_id: DEPT2, created_by: USER }, true],
    ['qm', { department_id: DEPT2 }, false],
    ['viewer', { department_id: DEPT, author_id: USER }, false],
  ])('%s may write %p: %s', (role, row, expected) => {
    expect(access.canWrite(caller({ role }), row)).toBe(expected);
  });

  it('lets an API key without a user write every record', () => {
    expect(access.canWrite(caller({ user_id: null, role: null }), { department_id: DEPT2 })).toBe(true);
  });
});
