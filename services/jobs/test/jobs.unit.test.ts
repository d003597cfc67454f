import type { CallerContext, ServiceDeps } from '@lab/kit';
import { createJob, listJobs } from '../src/api';
import { layout } from '../src/index';
import { toCsv } from './csv-oracle';
import { storableTimestamp } from '@lab/kit';
import { INPUTS } from '../src/job-types';

describe('box layout', () => {
  it('puts samples at their metadata.position and fills the rest row by row', () => {
    const s = (name: string, position?: string) => ({ name, metadata: position ? { position } : {} });
    const { grid, overflow } = layout([s('x'), s('b2', 'B2'), s('y'), s('bad', 'Z9'), s('z'), s('w')], 2, 2);
    expect(grid.map((r) => r.map((c) => c?.name))).toEqual([
      ['x', 'y'],
      ['bad', 'b2'],
    ]);
    expect(overflow.map((o) => o.name)).toEqual(['z', 'w']);
  });
});

describe('CSV', () => {
  it('quotes, keeps numbers and neutralises formulas in text', () => {
    const csv = toCsv([
      { a: 'x,y', b: -2.5 },
      { a: '=cmd()', c: { k: '"q"' } },
    ]);
    expect(csv).toBe('a,b,c\r\n"x,y",-2.5,\r\n\'=cmd(),,"{""k"":""\\""q\\""""}"\r\n');
  });
});

describe('timestamps PostgreSQL cannot store', () => {
  const caller: CallerContext = {
    org_id: '0190a0c8-0000-7000-8000-00000000000a',
    user_id: '0190a0c8-0000-7000-8000-00000000000b',
    role: 'admin',
    department_id: null,
    scopes: ['*'],
    token_kind: 'api_key',
    token_id: '0190a0c8-0000-7000-8000-00000000000c',
    request_id: 'r',
  };
  // nothing past validation is reached: any use of deps would throw
  const deps = {} as ServiceDeps;
  const BAD = ['0000-01-01T00:00:00Z', '0001-01-01T00:30:00+01:00', '2024-01-01T00:00:00+16:00', '2024-01-01T00:00:00-23:00'];

  // year 0000 and offsets of 16 hours or more pass zod's ISO format but not timestamptz:
  // the list was a 500, and an audit_export was accepted (202) only to fail on every attempt
  it.each(BAD)('refuses the list cursor %s with 400', async (cursor) => {
    await expect(listJobs(deps, caller, { cursor })).rejects.toMatchObject({ kind: 'invalid', code: 'validation_failed' });
  });
  it.each(BAD)('refuses an audit_export from %s with 400', async (from) => {
    await expect(createJob(deps, caller, { job_type: 'audit_export', input: { from } }, 3)).rejects.toMatchObject({
      kind: 'invalid',
      details: { field: 'input.from' },
    });
  });
  it('takes the timestamps PostgreSQL stores', () => {
    for (const t of ['0001-01-01T00:00:00Z', '2024-01-01T00:00:00+15:59', '2024-01-01T00:00:00.123456Z']) {
      expect(storableTimestamp(t)).toBe(true);
      expect(INPUTS.audit_export.safeParse({ from: t, to: t }).success).toBe(true);
    }
  });
});
