import path from 'node:path';
import { sql } from 'drizzle-orm';
import { migrate, newId, openDatabase, type Database } from '@lab/kit';
import { existsSync, mkdirSync, utimesSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { claimNext, runningJobs } from '../src/store';
import { SCRATCH_DIR, sweepScratch } from '../src/scratch';
import { dropFreshDatabases, freshDatabaseUrl } from '../../../testing/src/backing';

/** The worker's claim on a database of its own: which job goes next. */
let db: Database;

beforeAll(async () => {
  db = await openDatabase({ url: await freshDatabaseUrl(), dataDir: `/tmp/lab-jobs-claim-${newId()}`, poolSize: 2 });
  await migrate(db, 'jobs', path.join(__dirname, '..', 'migrations'));
});

afterAll(async () => {
  await db?.close();
  await dropFreshDatabases();
});

/** Queues jobs of one organisation, each a millisecond later than the one before. */
async function queue(org: string, n: number, startMs: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const id = newId();
    ids.push(id);
    const at = new Date(Date.now() - 60_000 + startMs + i).toISOString();
    await db.orm.execute(sql`insert into jobs.jobs (id, org_id, job_type, enqueued_at, run_after)
      values (${id}::uuid, ${org}::uuid, 'audit_export', ${at}::timestamptz, ${at}::timestamptz)`);
  }
  return ids;
}

const claim = () => db.tx((tx) => claimNext(tx, 'worker-1'));

test('an organisation with a backlog shares the workers with the others', async () => {
  const busy = newId();
  const quiet = newId();
  const other = newId();
  const backlog = await queue(busy, 5, 0);
  const [q] = await queue(quiet, 1, 100);
  const [o] = await queue(other, 1, 200);
  // every organisation has none running: the earliest due goes first
  expect((await claim())?.id).toBe(backlog[0]);
  // the busy one has one running now: the others go before its second
  expect((await claim())?.id).toBe(q);
  expect((await claim())?.id).toBe(o);
  // one running each: back to the earliest due
  expect((await claim())?.id).toBe(backlog[1]);
  expect((await claim())?.id).toBe(backlog[2]);
  const [late] = await queue(quiet, 1, 300);
  // quiet has 1 running, busy 3: quiet's new job goes before busy's fourth
  expect((await claim())?.id).toBe(late);
  expect((await claim())?.id).toBe(backlog[3]);
  expect((await claim())?.id).toBe(backlog[4]);
  expect(await claim()).toBeUndefined();
});

test('concurrent claims take different jobs of one backlog', async () => {
  const org = newId();
  const ids = await queue(org, 4, 1_000);
  const got = await Promise.all([claim(), claim()]);
  expect(got.every((j) => j && ids.includes(j.id))).toBe(true);
  expect(new Set(got.map((j) => j!.id)).size).toBe(2);
});

test('a job not yet due is not claimed', async () => {
  const org = newId();
  const id = newId();
  await db.orm.execute(sql`insert into jobs.jobs (id, org_id, job_type, enqueued_at, run_after)
    values (${id}::uuid, ${org}::uuid, 'audit_export', now(), now() + interval '1 hour')`);
  // whatever earlier tests left due is claimed; this one never is
  const claimed: string[] = [];
  for (let j = await claim(); j; j = await claim()) claimed.push(j.id);
  expect(claimed).not.toContain(id);
});

test('the scratch sweep removes what dead runs left, not what a running job or a new run uses', async () => {
  const root = await mkdtemp(join(tmpdir(), 'lab-jobs-sweep-'));
  try {
    const org = newId();
    const [runningId, deadId] = [newId(), newId()];
    for (const [id, status] of [
      [runningId, 'running'],
      [deadId, 'dead'],
    ]) {
      await db.orm.execute(
        sql`insert into jobs.jobs (id, org_id, job_type, enqueued_at, status) values (${id}::uuid, ${org}::uuid, 'audit_export', now(), ${status})`,
      );
    }
    const dir = (name: string, old: boolean) => {
      const p = join(root, SCRATCH_DIR, name);
      mkdirSync(p, { recursive: true });
      writeFileSync(join(p, 'table.json'), '[]');
      if (old) utimesSync(p, new Date(Date.now() - 3_600_000), new Date(Date.now() - 3_600_000));
      return p;
    };
    const ofRunning = dir(`${runningId}-aaaaaa`, true);
    const ofDead = dir(`${deadId}-bbbbbb`, true);
    const ofNobody = dir(`${newId()}-cccccc`, true);
    const young = dir(`${deadId}-dddddd`, false);
    expect(await sweepScratch(root, (ids) => runningJobs(db.orm, ids))).toBe(2);
    expect([ofRunning, ofDead, ofNobody, young].map((p) => existsSync(p))).toEqual([true, false, false, true]);
  } finally {
    await rm(root, { recursive: true, force: true });
  }
});
