import { createHmac } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { metrics, newId, type RunningService } from '@lab/kit';
import { startStack, type Stack } from '@lab/testing';
import { call, eventually } from '../../gateway/test/http';
import { startJobsWorker } from './worker';
import { INBOUND_QUEUE } from '../src/inbound';

/**
 * Jobs requested by inbound webhook events: the receiver stores the event
 * (webhooks), the jobs worker makes the job from inbound_webhook.received and
 * reports the outcome, and the webhooks service records it on the event's row.
 * The stack's jobs instance serves the API only (JOBS_ROLE=api); the worker the
 * test starts consumes the events, so nothing depends on the API role.
 */
let stack: Stack;
let artifactDir: string;
let worker: RunningService | undefined;
let db: pg.Client | undefined;
let org: string;
let admin: string;
let researcher: string;
let entryId: string;
let ep: { id: string; slug: string; secret: string; job_type: string | null };

const api = (method: string, path: string, token: string, body?: unknown) => call(stack.url, method, path, { token, body });

beforeAll(async () => {
  artifactDir = await mkdtemp(join(tmpdir(), 'lab-artifacts-'));
  process.env.JOBS_ROLE = 'api';
  stack = await startStack({ services: ['identity', 'notebook', 'webhooks', 'jobs'] });
  delete process.env.JOBS_ROLE;
  org = (await stack.admin.createOrg({ rate_limit: { per_minute: 100_000, per_hour: 1_000_000 } })).id;
  const member = async (role: string) => {
    const u = await stack.admin.createUser();
    await stack.admin.putMember(org, u.id, role);
    return (await stack.admin.createPat(u.id, { scopes: ['read', 'write'], org_id: org })).token;
  };
  admin = await member('admin');
  researcher = await member('researcher');
  const entry = await api('POST', '/v1/experiments', researcher, { title: 'Inbound-requested report' });
  if (entry.status !== 201) throw new Error(`experiment: ${entry.status} ${entry.text}`);
  entryId = entry.body.data.id;
  worker = await startJobsWorker(stack, { artifactDir });
  ep = await stack.admin.call('POST', `/orgs/${org}/inbound-endpoints`, { job_type: 'experiment_entry_pdf' }, 201);
  if (stack.databaseUrl) {
    db = new pg.Client({ connectionString: stack.databaseUrl });
    await db.connect();
  }
});

afterAll(async () => {
  await db?.end();
  await worker?.stop();
  await stack?.stop();
  await rm(artifactDir, { recursive: true, force: true });
});

const sign = (secret: string, raw: string, t = Math.floor(Date.now() / 1000)) =>
  `t=${t},v1=${createHmac('sha256', secret).update(`${t}.`).update(raw).digest('hex')}`;

async function send(body: Record<string, unknown>, e: { slug: string; secret: string } = ep) {
  const raw = JSON.stringify({ event_type: 'entry.finalised', occurred_at: new Date().toISOString(), ...body });
  return call(stack.url, 'POST', `/functions/v1/inbound-webhook/${org}/${e.slug}`, { body: raw, headers: { 'x-service-signature': sign(e.secret, raw) } });
}

/** Inbound events the jobs worker has handled so far (the services run in this process). */
async function handled(): Promise<number> {
  const { values } = await metrics().consumed.get();
  return values.filter((v) => v.labels.queue === INBOUND_QUEUE && v.labels.outcome === 'ok').reduce((n, v) => n + v.value, 0);
}

const entryJobs = async () => (await api('GET', '/v1/jobs?job_type=experiment_entry_pdf', admin)).body.data as { id: string; status: string }[];

/** The job columns of an inbound event's row once its outcome is recorded (real PostgreSQL only). */
async function outcome(eventId: string) {
  return eventually(async () => {
    const { rows } = await db!.query('select job_status, job_id::text, job_reason from webhooks.inbound_events where id = $1', [eventId]);
    return rows[0]?.job_status === 'pending' ? undefined : rows[0];
  }, 20_000);
}

describe('endpoint configuration', () => {
  test("a job type outside the jobs allowlist is 400 validation_failed; administrators' export types may be configured", async () => {
    const bad = await call(stack.url, 'POST', `/admin/v1/orgs/${org}/inbound-endpoints`, { token: stack.operatorToken, body: { job_type: 'mine_bitcoin' } });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatchObject({ code: 'validation_failed', details: { field: 'job_type' } });
    const exportEp = await stack.admin.call<typeof ep>('POST', `/orgs/${org}/inbound-endpoints`, { job_type: 'org_data_export' }, 201);
    expect(exportEp.job_type).toBe('org_data_export');
    expect(ep.job_type).toBe('experiment_entry_pdf');
  });
});

describe('one job per accepted event', () => {
  let eventId: string;
  let jobId: string;

  test('an accepted event makes a job, a system request of the organisation, that runs to succeeded', async () => {
    // a real sender's payload: the field the job type defines, and the sender's own
    const payload = { entry_id: entryId, order_no: 'PO-4711', lims: { batch: 'B-7', priority: 'high' } };
    const r = await send({ external_id: 'lims-4711', payload });
    expect(r.status).toBe(202);
    eventId = r.body.event_id;
    const [job] = await eventually(async () => {
      const jobs = await entryJobs();
      return jobs.length ? jobs : undefined;
    }, 20_000);
    jobId = job!.id;
    const done = await eventually(async () => {
      const j = (await api('GET', `/v1/jobs/${jobId}`, admin)).body.data;
      return j.status === 'succeeded' || j.status === 'dead' ? j : undefined;
    }, 30_000);
    expect(done).toMatchObject({ job_type: 'experiment_entry_pdf', status: 'succeeded', progress: 100, error_message: null });
    // the event and its whole payload travel with the job
    expect(done).toMatchObject({ inbound_event_id: eventId, context: payload });
    expect(done.result_meta).toMatchObject({ content_type: 'application/pdf' });
    // no user asked: administrators see it, a researcher does not
    expect((await api('GET', `/v1/jobs/${jobId}`, researcher)).status).toBe(404);
    if (db) {
      expect(await outcome(eventId)).toEqual({ job_status: 'created', job_id: jobId, job_reason: null });
      const { rows } = await db.query('select inbound_event_id::text, created_by, created_by_token_id, input from jobs.jobs where id = $1', [jobId]);
      expect(rows).toEqual([{ inbound_event_id: eventId, created_by: null, created_by_token_id: null, input: { entry_id: entryId } }]);
    }
  });

  test('a repeated external_id and a redelivered event make no second job', async () => {
    const again = await send({ external_id: 'lims-4711', payload: { entry_id: entryId } });
    expect(again.status).toBe(200);
    expect(again.body).toEqual({ event_id: eventId, duplicate: true });
    // the bus hands the event over once more (as after a crash before the ack), under another message id
    const before = await handled();
    await stack.bus.publish([
      {
        id: newId(),
        type: 'inbound_webhook.received',
        org_id: org,
        occurred_at: new Date().toISOString(),
        data: {
          event_id: eventId,
          endpoint_id: ep.id,
          event_type: 'entry.finalised',
          external_id: 'lims-4711',
          occurred_at: null,
          job_type: 'experiment_entry_pdf',
          payload: { entry_id: entryId },
        },
      },
    ]);
    await eventually(async () => ((await handled()) > before ? true : undefined), 20_000);
    expect((await entryJobs()).map((j) => j.id)).toEqual([jobId]);
    if (db) expect(await outcome(eventId)).toEqual({ job_status: 'created', job_id: jobId, job_reason: null });
  });

  test('a payload the job cannot run with makes a job that is dead at once with the reason, visible through the API, never retried', async () => {
    const before = await handled();
    const r = await send({ external_id: 'lims-4712', payload: { entry_id: 'EXP-000001', order_no: 'PO-4712' } });
    expect(r.status).toBe(202);
    await eventually(async () => ((await handled()) > before ? true : undefined), 20_000);
    const dead = await eventually(async () => {
      const jobs = (await api('GET', '/v1/jobs?job_type=experiment_entry_pdf&status=dead', admin)).body.data as any[];
      return jobs.find((j) => j.inbound_event_id === r.body.event_id);
    }, 20_000);
    expect(dead).toMatchObject({ status: 'dead', attempts: 0, context: { entry_id: 'EXP-000001', order_no: 'PO-4712' } });
    expect(dead.error_message).toMatch(/^validation_failed: payload\.entry_id: /);
    expect(dead.finished_at).toEqual(expect.any(String));
    if (db) {
      expect(await outcome(r.body.event_id)).toEqual({ job_status: 'created', job_id: dead.id, job_reason: null });
      const { rows } = await db.query('select count(*)::int as n from jobs.jobs where inbound_event_id = $1', [r.body.event_id]);
      expect(rows[0].n).toBe(1);
    }
    // a payload without the field at all is the same: a dead job naming it
    const missing = await send({ external_id: 'lims-4713', payload: { order_no: 'PO-4713' } });
    const none = await eventually(async () => {
      const jobs = (await api('GET', '/v1/jobs?job_type=experiment_entry_pdf&status=dead', admin)).body.data as any[];
      return jobs.find((j) => j.inbound_event_id === missing.body.event_id);
    }, 20_000);
    expect(none.error_message).toContain('payload.entry_id');
  });

  // the row is written directly, as only an older version could have stored it: PostgreSQL only
  (process.env.DATABASE_URL ? test : test.skip)(
    'an endpoint stored with a job type outside the allowlist (before it was checked) gets its events rejected',
    async () => {
      const legacy = { id: newId(), slug: `legacy-${Date.now()}`, secret: 'whsec_legacy-endpoint-secret-000000000000000' };
      await db!.query(
        `insert into webhooks.inbound_endpoints (id, org_id, slug, slug_generated, secret, job_type) values ($1, $2, $3, false, $4, 'coffee_pdf')`,
        [legacy.id, org, legacy.slug, legacy.secret],
      );
      const r = await send({ payload: { entry_id: entryId } }, legacy);
      expect(r.status).toBe(202);
      const row = await outcome(r.body.event_id);
      expect(row).toMatchObject({ job_status: 'rejected', job_id: null });
      expect(row.job_reason).toMatch(/^job_type_not_allowed: /);
      const { rows } = await db!.query('select count(*)::int as n from jobs.jobs where inbound_event_id = $1', [r.body.event_id]);
      expect(rows[0].n).toBe(0);
    },
  );
});
