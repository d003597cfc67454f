import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { startStack, waitFor, type Stack } from '@lab/testing';
import { call } from './http';

/**
 * "A department that records still name cannot be deleted" is identity's rule,
 * kept where the department is (decision 056): a write that names a department
 * holds it at identity first, and its committed change is counted there. So a
 * record written and the department deleted at the same moment never leave a
 * record naming a department that is gone, whichever comes first, over real HTTP
 * and real services, and the refusal is the spec's 409 department_in_use.
 */
let stack: Stack;
let org: string;
let key: string;
let db: pg.Client;

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'notebook', 'inventory', 'audit'] });
  org = (await stack.admin.createOrg({ name: 'Race lab', rate_limit: { per_minute: 100_000, per_hour: 1_000_000 } })).id;
  key = (await stack.admin.createApiKey(org, { scopes: ['write'] })).token;
  db = new pg.Client({ connectionString: stack.databaseUrl });
  await db.connect();
});

afterAll(async () => {
  await db?.end();
  await stack?.stop();
});

const op = (method: string, path: string, body?: unknown) => call(stack.url, method, `/admin/v1${path}`, { token: stack.operatorToken, body });
const api = (method: string, path: string, body?: unknown) => call(stack.url, method, path, { token: key, body });
const newDepartment = async (name: string): Promise<string> => (await op('POST', `/orgs/${org}/departments`, { name })).body.data.id;

/** Records of the notebook and inventory that name the department (read from their tables, not through any API). */
async function naming(department: string): Promise<number> {
  const r = await db.query<{ n: number }>(
    `select ((select count(*) from notebook.samples where department_id = $1) + (select count(*) from inventory.reagents where department_id = $1))::int as n`,
    [department],
  );
  return r.rows[0]!.n;
}
const exists = async (department: string) => (await db.query('select 1 from identity.departments where id = $1', [department])).rowCount === 1;

describe('deleting a department while records name it', () => {
  it('never leaves a record naming a deleted department, creating or moving records at the same moment', async () => {
    const outcomes = new Set<string>();
    for (let i = 0; i < 16; i++) {
      const dept = await newDepartment(`Race ${i}`);
      // half the rounds create a record naming it, half move an existing one into it
      const moved = i % 2 === 1 ? (await api('POST', '/v1/reagents', { name: `R${i}` })).body.data.id : undefined;
      const write =
        moved !== undefined
          ? api('PATCH', `/v1/reagents/${moved}`, { department_id: dept })
          : api('POST', '/v1/samples', { name: `S${i}`, department_id: dept });
      const [w, d] = await Promise.all([write, op('DELETE', `/orgs/${org}/departments/${dept}`)]);
      outcomes.add(`${w.status} ${d.status}`);
      // one of the two wins: the write (and the deletion is refused 409), or the deletion (and the write 400)
      expect([`${w.status} ${d.status}`]).toEqual([expect.stringMatching(/^(20[01] 409|400 204)$/)]);
      if (d.status === 409) {
        expect(d.body.error.code).toBe('department_in_use');
        expect(d.body.error.details).toEqual({ records: { [moved ? 'reagents' : 'samples']: 1 } });
      } else {
        expect(w.body.error.details.fields).toEqual([{ path: 'department_id', message: 'department_id names no department of this organisation' }]);
      }
      // the invariant itself, read from the tables
      if (!(await exists(dept))) expect(await naming(dept)).toBe(0);
    }
    console.info(`department deletion races: ${[...outcomes].join(', ')}`);
  });

  it('refuses 409 while a record names it, and deletes it as soon as none does', async () => {
    const dept = await newDepartment('Chemistry');
    const sample = (await api('POST', '/v1/samples', { name: 'S', department_id: dept })).body.data;
    const refused = await op('DELETE', `/orgs/${org}/departments/${dept}`);
    expect([refused.status, refused.body.error.code, refused.body.error.details]).toEqual([409, 'department_in_use', { records: { samples: 1 } }]);
    // counted by identity from the notebook's event too, not only from its answer
    await waitFor('the sample counted at identity', async () => {
      const r = await db.query<{ n: number }>('select n from identity.department_refs where department_id = $1', [dept]);
      return r.rows[0]?.n === 1;
    });
    expect((await db.query('select 1 from identity.department_holds where department_id = $1', [dept])).rowCount).toBe(0);

    expect((await api('PATCH', `/v1/samples/${sample.id}`, { department_id: null })).status).toBe(200);
    expect((await op('DELETE', `/orgs/${org}/departments/${dept}`)).status).toBe(204);
    // a write naming it now is refused, and nothing names it
    const late = await api('POST', '/v1/samples', { name: 'late', department_id: dept });
    expect([late.status, late.body.error.code]).toEqual([400, 'validation_failed']);
    expect(await naming(dept)).toBe(0);
  });

  it("counts the records written before the rule once, from the record services' migrations", async () => {
    const dept = await newDepartment('Legacy');
    // two samples as an earlier version stored them: straight into the table, no hold, no event
    for (const name of ['old 1', 'old 2']) {
      await db.query('insert into notebook.samples (id, org_id, name, department_id) values (gen_random_uuid(), $1, $2, $3)', [org, name, dept]);
    }
    expect((await op('DELETE', `/orgs/${org}/departments/${dept}`)).status).toBe(204);
    const again = await newDepartment('Legacy again');
    await db.query('update notebook.samples set department_id = $1 where department_id = $2', [again, dept]);
    // the notebook's migration, as it runs once on the first start of this version
    await db.query(readFileSync(join(__dirname, '../../notebook/migrations/003_count_department_references.sql'), 'utf8'));
    await waitFor('the old samples counted at identity', async () => {
      const r = await db.query<{ n: number }>("select n from identity.department_refs where department_id = $1 and resource = 'samples'", [again]);
      return r.rows[0]?.n === 2;
    });
    const refused = await op('DELETE', `/orgs/${org}/departments/${again}`);
    expect([refused.status, refused.body.error.details]).toEqual([409, { records: { samples: 2 } }]);
  });

  it('lets go of the hold of a write that was refused', async () => {
    const dept = await newDepartment('Refused');
    // a project the organisation does not have is refused in the write's transaction, after the hold
    const r = await api('POST', '/v1/experiments', { title: 'E', project_id: randomUUID(), department_id: dept });
    expect([r.status, r.body.error.details.fields]).toEqual([400, [{ path: 'project_id', message: 'project_id names no project of this organisation' }]]);
    expect((await db.query('select 1 from identity.department_holds where department_id = $1', [dept])).rowCount).toBe(0);
    expect((await op('DELETE', `/orgs/${org}/departments/${dept}`)).status).toBe(204);
  });
});
