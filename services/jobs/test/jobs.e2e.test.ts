import { randomUUID } from 'node:crypto';
import { mkdtemp, readdir, readlink, rm, truncate } from 'node:fs/promises';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { getChannelzHandlers } from '@grpc/grpc-js';
import { PDFDocument } from 'pdf-lib';
import yauzl from 'yauzl';
import { DirectoryFileStore, openFileStore, sqlArray, type RunningService } from '@lab/kit';
import { rawExchange, startStack, waitFor, type Stack } from '@lab/testing';
import { call, eventually } from '../../gateway/test/http';
import { toCsv } from './csv-oracle';
import { SCRATCH_DIR } from '../src/scratch';
import { purgeExpiredArtifacts } from '../src/artifact-retention';
import { sql } from 'drizzle-orm';
import { createReadStream, existsSync } from 'node:fs';
import { startJobsWorker } from './worker';
import { pdfText } from './pdf-text';

/**
 * Jobs through the gateway. The stack's jobs instance serves the API only
 * (JOBS_ROLE=api); the tests run worker instances themselves, so one can be
 * stopped in the middle of a job and another started.
 */
let stack: Stack;
let artifactDir: string;
let worker: RunningService | undefined;
let orgId: string;
let admin: string;
let researcher: string;
let other: string;
let unboundWrite: string;
const data: Record<string, string> = {};

const api = (method: string, path: string, token: string, body?: unknown, headers?: Record<string, string>) =>
  call(stack.url, method, path, { token, body, headers });

function startWorker(
  opts: { stepDelayMs?: number; visibilityMs?: number; pageSize?: number; exportMaxRecords?: number; reportMaxBytes?: number } = {},
): Promise<RunningService> {
  return startJobsWorker(stack, { ...opts, artifactDir, visibilityMs: opts.visibilityMs ?? 30_000, stepDelayMs: opts.stepDelayMs ?? 100 });
}

async function member(role: string, name?: string): Promise<string> {
  const u = await stack.admin.createUser();
  await stack.admin.putMember(orgId, u.id, role);
  if (name) data[name] = u.id;
  return (await stack.admin.createPat(u.id, { scopes: ['read', 'write'], org_id: orgId })).token;
}

beforeAll(async () => {
  artifactDir = await mkdtemp(join(tmpdir(), 'lab-artifacts-'));
  process.env.JOBS_ROLE = 'api';
  process.env.JOBS_ARTIFACT_DIR = artifactDir;
  // these tests look at the artifacts as files (their leftovers, open handles); the
  // stores themselves are tested in libs/kit, the database one across replicas in
  // testing/test/files-across-replicas.e2e.test.ts
  process.env.JOBS_ARTIFACT_STORE = 'filesystem';
  stack = await startStack({ services: ['identity', 'audit', 'notebook', 'inventory', 'equipment', 'notifications', 'jobs'] });
  delete process.env.JOBS_ROLE;
  // the tests poll job status: room for it above the default rate limit
  orgId = (await stack.admin.createOrg({ modules: ['lab_equipment'], rate_limit: { per_minute: 100_000, per_hour: 1_000_000 } })).id;
  admin = await member('admin');
  researcher = await member('researcher', 'researcherId');
  other = await member('researcher');
  unboundWrite = (await stack.admin.createApiKey(orgId, { scopes: ['write'] })).token;

  const ok = async (path: string, body: unknown, token = admin) => {
    const r = await api('POST', path, token, body);
    if (r.status !== 201) throw new Error(`${path}: ${r.status} ${r.text}`);
    return r.body.data.id as string;
  };
  data.entry = await ok('/v1/experiments', { title: 'Enzyme kinetics of lactase', content: { steps: ['mix', 'measure'] } }, researcher);
  data.equipment = await ok('/v1/equipment', { name: 'Centrifuge 5424' });
  await ok(`/v1/equipment/${data.equipment}/usage`, {
    purpose: 'spin',
    ended_at: new Date().toISOString(),
    started_at: new Date(Date.now() - 3_600_000).toISOString(),
  });
  await ok(`/v1/equipment/${data.equipment}/maintenance`, { maintenance_type: 'inspection', completed_date: '2026-01-10' });
  await ok(`/v1/equipment/${data.equipment}/calibrations`, { standard: 'A', ok: true });
  data.reagent = await ok('/v1/reagents', { name: 'Acetone', signal_word: 'danger', h_phrases: ['H225', 'H319'] });
  await ok('/v1/stock-items', { catalog_id: data.reagent, quantity: 2.5, unit: 'L' });
  data.sample = await ok('/v1/samples', { name: 'S-1', storage_location: 'Box 7', metadata: { position: 'B2' } });
  await ok('/v1/samples', { name: 'S-2', storage_location: 'Box 7' });
  worker = await startWorker();
});

afterAll(async () => {
  await worker?.stop();
  await stack?.stop();
  await rm(artifactDir, { recursive: true, force: true });
  delete process.env.JOBS_ARTIFACT_DIR;
  delete process.env.JOBS_ARTIFACT_STORE;
});

async function submit(token: string, job_type: string, input?: unknown) {
  const r = await api('POST', '/v1/jobs', token, { job_type, ...(input === undefined ? {} : { input }) });
  if (r.status !== 202) throw new Error(`${job_type}: ${r.status} ${r.text}`);
  return r.body.data as { id: string; status: string };
}

async function finished(token: string, id: string, timeoutMs = 30_000) {
  return eventually(async () => {
    const j = (await api('GET', `/v1/jobs/${id}`, token)).body.data;
    return j.status === 'succeeded' || j.status === 'dead' ? j : undefined;
  }, timeoutMs);
}

async function artifact(token: string, id: string) {
  const res = await fetch(`${stack.url}/v1/jobs/${id}/artifact`, { headers: { authorization: `Bearer ${token}` } });
  return { status: res.status, type: res.headers.get('content-type'), bytes: Buffer.from(await res.arrayBuffer()) };
}

function zipNames(bytes: Buffer): Promise<string[]> {
  return new Promise((resolve, reject) =>
    yauzl.fromBuffer(bytes, { lazyEntries: true }, (err, zip) => {
      if (err || !zip) {
        reject(err ?? new Error('no zip file'));
        return;
      }
      const names: string[] = [];
      zip.on('entry', (e: yauzl.Entry) => {
        names.push(e.fileName);
        zip.readEntry();
      });
      zip.on('end', () => resolve(names));
      zip.on('error', reject);
      zip.readEntry();
    }),
  );
}

/** The files of a ZIP by name, as text. */
function zipFiles(bytes: Buffer): Promise<Map<string, string>> {
  return new Promise((resolve, reject) =>
    yauzl.fromBuffer(bytes, { lazyEntries: true }, (err, zip) => {
      if (err || !zip) {
        reject(err ?? new Error('no zip file'));
        return;
      }
      const files = new Map<string, string>();
      zip.on('entry', (e: yauzl.Entry) =>
        zip.openReadStream(e, (e2, stream) => {
          if (e2 || !stream) {
            reject(e2 ?? new Error('no entry stream'));
            return;
          }
          const parts: Buffer[] = [];
          stream.on('data', (b: Buffer) => parts.push(b));
          stream.on('end', () => {
            files.set(e.fileName, Buffer.concat(parts).toString('utf8'));
            zip.readEntry();
          });
          stream.on('error', reject);
        }),
      );
      zip.on('end', () => resolve(files));
      zip.on('error', reject);
      zip.readEntry();
    }),
  );
}

/** Paths under the artifact directory that name a job: its artifact, or anything left of its staging. */
async function leftoversOf(jobId: string): Promise<string[]> {
  return (await readdir(artifactDir, { recursive: true })).filter((p) => p.includes(jobId));
}

describe('POST /v1/jobs', () => {
  it('queues a job: 202 with every Job field', async () => {
    const r = await api('POST', '/v1/jobs', researcher, { job_type: 'experiment_entry_pdf', input: { entry_id: data.entry } });
    expect(r.status).toBe(202);
    expect(Object.keys(r.body.data).sort()).toEqual(
      [
        'id',
        'job_type',
        'status',
        'progress',
        'status_text',
        'result_path',
        'result_meta',
        'error_message',
        'attempts',
        'max_attempts',
        'enqueued_at',
        'started_at',
        'finished_at',
      ].sort(),
    );
    expect(r.body.data).toMatchObject({ job_type: 'experiment_entry_pdf', progress: 0, attempts: 0, max_attempts: 3, result_path: null });
    // the time as PostgreSQL writes it in JSON (to the microsecond, +00:00), as it always was
    expect(r.body.data.enqueued_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?\+00:00$/);
    const done = await finished(researcher, r.body.data.id);
    expect(done.started_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?\+00:00$/);
  });

  it.each([
    ['a job type outside the allowlist', 'researcher', { job_type: 'mine_bitcoin' }, 403],
    ['an empty job type (outside the allowlist too)', 'researcher', { job_type: '' }, 403],
    ['an overlong job type (outside the allowlist too)', 'researcher', { job_type: 'x'.repeat(500) }, 403],
    ['a job type that is not a string', 'researcher', { job_type: 7 }, 400],
    ["an administrators' job type for a researcher", 'researcher', { job_type: 'audit_export' }, 403],
    ["an administrators' job type for an API key without admin scope", 'unbound', { job_type: 'org_data_export' }, 403],
    ['no job_type', 'researcher', { input: {} }, 400],
    ['an input that is not an object', 'researcher', { job_type: 'box_layout_pdf', input: [1] }, 400],
    ['experiment_entry_pdf without entry_id', 'researcher', { job_type: 'experiment_entry_pdf', input: {} }, 400],
    ['experiment_entry_pdf with a bad entry_id', 'researcher', { job_type: 'experiment_entry_pdf', input: { entry_id: 'x' } }, 400],
    ['an unknown field', 'researcher', { job_type: 'box_layout_pdf', colour: 'red' }, 400],
  ])('refuses %s', async (_n, token, body, status) => {
    const r = await api('POST', '/v1/jobs', token === 'unbound' ? unboundWrite : researcher, body);
    expect(r.status).toBe(status);
  });

  it('replays an Idempotency-Key', async () => {
    const key = randomUUID();
    const body = { job_type: 'box_layout_pdf', input: { rows: 2, cols: 2 } };
    const a = await api('POST', '/v1/jobs', researcher, body, { 'Idempotency-Key': key });
    const b = await api('POST', '/v1/jobs', researcher, body, { 'Idempotency-Key': key });
    expect(b.status).toBe(202);
    expect(b.headers.get('idempotent-replay')).toBe('true');
    expect(b.body.data.id).toBe(a.body.data.id);
    await finished(researcher, a.body.data.id);
  });
});

describe('visibility and listing', () => {
  it('shows a job to its creator and administrators only', async () => {
    const job = await submit(researcher, 'box_layout_pdf', { rows: 1, cols: 1 });
    expect((await api('GET', `/v1/jobs/${job.id}`, researcher)).status).toBe(200);
    expect((await api('GET', `/v1/jobs/${job.id}`, admin)).status).toBe(200);
    expect((await api('GET', `/v1/jobs/${job.id}`, other)).status).toBe(404);
    expect((await api('GET', `/v1/jobs/${job.id}`, unboundWrite)).status).toBe(404);
    expect((await api('GET', `/v1/jobs/${randomUUID()}`, admin)).status).toBe(404);
    const done = await finished(researcher, job.id);
    expect((await artifact(other, job.id)).status).toBe(404);
    expect((await artifact(researcher, done.id)).status).toBe(200);
  });

  it('pages newest first by cursor without gaps or repeats, filtered by status and job_type', async () => {
    const mine = [];
    for (let i = 0; i < 3; i++) mine.push(await submit(other, 'box_layout_pdf', { rows: 1, cols: 1, title: `page ${i}` }));
    for (const j of mine) await finished(other, j.id);
    const first = await api('GET', '/v1/jobs?limit=2&job_type=box_layout_pdf', other);
    expect(first.status).toBe(200);
    expect(first.body.count).toBe(2);
    expect(first.body.next_cursor).toEqual(expect.any(String));
    const second = await api('GET', `/v1/jobs?limit=2&job_type=box_layout_pdf&cursor=${encodeURIComponent(first.body.next_cursor)}`, other);
    const ids = [...first.body.data, ...second.body.data].map((j: { id: string }) => j.id);
    expect(ids).toEqual(mine.map((j) => j.id).reverse());
    expect(second.body.next_cursor).toBeNull();
    expect((await api('GET', '/v1/jobs?status=dead', other)).body.data).toEqual([]);
    expect((await api('GET', '/v1/jobs?status=succeeded', other)).body.count).toBe(3);
    const all = await api('GET', '/v1/jobs?limit=200', admin);
    expect(all.body.data.map((j: { id: string }) => j.id)).toEqual(expect.arrayContaining(ids));
  });

  it.each(['limit=0', 'limit=201', 'status=done', 'cursor=yesterday', 'colour=red'])('refuses %s', async (q) => {
    expect((await api('GET', `/v1/jobs?${q}`, researcher)).status).toBe(400);
  });

  // PostgreSQL cannot take a NUL as a parameter: refused at the gateway, naming the parameter
  it.each(['job_type=%00', 'job_type=box%00', 'status=succeeded&job_type=a%00b'])('answers 400 validation_failed for a NUL in %s', async (q) => {
    const r = await api('GET', `/v1/jobs?${q}`, researcher);
    expect([r.status, r.body.error.code, r.body.error.details.field]).toEqual([400, 'validation_failed', 'job_type']);
  });
});

describe('job types', () => {
  it('experiment_entry_pdf: a PDF titled like the entry', async () => {
    const done = await finished(researcher, (await submit(researcher, 'experiment_entry_pdf', { entry_id: data.entry })).id);
    expect(done).toMatchObject({ status: 'succeeded', progress: 100, attempts: 1, result_path: expect.stringContaining('.pdf') });
    expect(done.result_meta).toMatchObject({ content_type: 'application/pdf', pages: expect.any(Number), sha256: expect.stringMatching(/^[0-9a-f]{64}$/) });
    const a = await artifact(researcher, done.id);
    expect(a.type).toBe('application/pdf');
    expect(a.bytes.length).toBe(done.result_meta.size);
    const pdf = await PDFDocument.load(a.bytes);
    expect(pdf.getPageCount()).toBeGreaterThan(0);
    expect(pdf.getTitle()).toBe('Enzyme kinetics of lactase');
  });

  it('experiment_entry_pdf: prints the signature manifest with meaning, signer, time and content hash', async () => {
    const password = 'a long enough password';
    const email = `pdf-signer-${Date.now()}@example.test`;
    const user = await stack.admin.createUser({ email, password, name: 'Pat Signer' });
    await stack.admin.putMember(orgId, user.id, 'researcher');
    const pat = (await stack.admin.createPat(user.id, { scopes: ['read', 'write'], org_id: orgId })).token;
    const id = (await api('POST', '/v1/experiments', pat, { title: 'Signed assay' })).body.data.id as string;
    const session = (await call(stack.url, 'POST', '/auth/v1/token', { body: { grant_type: 'password', email, password } })).body.access_token;
    const signed = await call(stack.url, 'POST', `/app/v1/experiments/${id}/sign`, {
      token: session,
      body: { password, meaning: 'authorship' },
      headers: { 'x-org-id': orgId },
    });
    expect(signed.status).toBe(200);
    const [sig] = signed.body.data.signatures;

    const done = await finished(pat, (await submit(pat, 'experiment_entry_pdf', { entry_id: id })).id);
    expect(done.status).toBe('succeeded');
    const shown = pdfText((await artifact(pat, done.id)).bytes);
    expect(shown).toContain(`authorship: Pat Signer (${user.id}) at ${sig.signed_at}`);
    expect(shown).toContain(`sha256 ${sig.content_hash} (matches this version)`);
    // an unsigned entry says so
    const unsigned = await finished(researcher, (await submit(researcher, 'experiment_entry_pdf', { entry_id: data.entry })).id);
    expect(pdfText((await artifact(researcher, unsigned.id)).bytes)).toContain('Not signed');
  });

  it.each([
    ['equipment_lifecycle_pdf', () => ({ equipment_id: data.equipment }), 'Equipment lifecycle: Centrifuge 5424'],
    ['equipment_book_pdf', () => ({ equipment_id: data.equipment }), 'Equipment log book: Centrifuge 5424'],
    ['maintenance_report_pdf', () => ({}), 'Maintenance report'],
    ['risk_assessment_pdf', () => ({}), 'Risk assessment'],
    ['box_layout_pdf', () => ({ rows: 3, cols: 4, storage_location: 'Box 7' }), 'Box layout: Box 7'],
  ])('%s: a PDF', async (type, input, title) => {
    const done = await finished(admin, (await submit(admin, type, input())).id);
    expect(done.status).toBe('succeeded');
    const pdf = await PDFDocument.load((await artifact(admin, done.id)).bytes);
    expect(pdf.getPageCount()).toBe(done.result_meta.pages);
    expect(pdf.getTitle()).toBe(title);
  });

  it.each([
    ['audit_export', () => ({}), ['manifest.json', 'audit.json', 'audit.csv']],
    ['biosafety_export', () => ({}), ['manifest.json', 'reagents.csv', 'stock_items.json', 'stock_movements.csv', 'samples.json']],
    ['gdpr_export', () => ({ user_id: data.researcherId }), ['manifest.json', 'member.json', 'experiments.json', 'experiments.csv', 'audit.csv']],
    ['org_data_export', () => ({}), ['manifest.json', 'experiments.json', 'reagents.csv', 'equipment_usage.json', 'equipment_calibrations.csv', 'audit.json']],
  ])('%s: a ZIP of JSON and CSV files', async (type, input, files) => {
    const done = await finished(admin, (await submit(admin, type, input())).id);
    expect(done.status).toBe('succeeded');
    expect(done.result_meta).toMatchObject({ content_type: 'application/zip', rows: expect.any(Number) });
    const a = await artifact(admin, done.id);
    expect(a.type).toBe('application/zip');
    expect(await zipNames(a.bytes)).toEqual(expect.arrayContaining(files));
  });
});

describe('exports larger than one page', () => {
  // a worker reading 2 records per page: a handful of records crosses many page boundaries
  const PAGE = 2;
  let marker: string;
  const swapWorker = async (opts: Parameters<typeof startWorker>[0]) => {
    await worker?.stop();
    worker = undefined;
    worker = await startWorker(opts);
  };

  beforeAll(async () => {
    marker = `paged-${randomUUID()}`;
    for (let i = 0; i < 2 * PAGE + 3; i++) {
      const r = await api('POST', '/v1/samples', admin, {
        name: `${marker}-${i}`,
        storage_location: marker,
        metadata: { note: `line one\nline "${i}"`, ...(i % 2 ? { odd: i } : {}) },
      });
      if (r.status !== 201) throw new Error(`sample: ${r.status} ${r.text}`);
    }
  });

  afterAll(async () => {
    await swapWorker({});
  });

  it('holds every record of every page, the same in .json and .csv', async () => {
    await swapWorker({ pageSize: PAGE });
    const done = await finished(admin, (await submit(admin, 'biosafety_export')).id);
    expect(done.status).toBe('succeeded');
    const files = await zipFiles((await artifact(admin, done.id)).bytes);
    expect([...files.keys()]).toEqual([
      'manifest.json',
      ...['reagents', 'stock_items', 'stock_movements', 'samples'].flatMap((t) => [`${t}.json`, `${t}.csv`]),
    ]);
    const manifest = JSON.parse(files.get('manifest.json')!);
    const samples = JSON.parse(files.get('samples.json')!) as { id: string; name: string }[];
    // every sample the organisation holds, once each, oldest first as listed
    const listed = (await api('GET', '/v1/samples?limit=500&order=asc', admin)).body.data as { id: string }[];
    expect(samples.length).toBeGreaterThan(2 * PAGE);
    expect(samples.map((x) => x.id)).toEqual(listed.map((x) => x.id));
    expect(samples.filter((x) => x.name.startsWith(marker))).toHaveLength(2 * PAGE + 3);
    expect(manifest.tables.samples).toBe(samples.length);
    expect(done.result_meta.rows).toBe(Object.values(manifest.tables as Record<string, number>).reduce((a, b) => a + b, 0));
    for (const t of ['reagents', 'stock_items', 'stock_movements', 'samples']) {
      const recs = JSON.parse(files.get(`${t}.json`)!);
      expect(files.get(`${t}.json`)).toBe(JSON.stringify(recs, null, 2));
      expect(files.get(`${t}.csv`)).toBe(toCsv(recs));
    }
    expect(await leftoversOf(done.id)).toEqual([expect.stringMatching(/\.zip$/)]);
  });

  it('follows the audit cursor past one page', async () => {
    const done = await finished(admin, (await submit(admin, 'audit_export')).id);
    expect(done.status).toBe('succeeded');
    const files = await zipFiles((await artifact(admin, done.id)).bytes);
    const audit = JSON.parse(files.get('audit.json')!) as { id: string; created_at: string }[];
    expect(audit.length).toBeGreaterThan(2 * PAGE);
    expect(new Set(audit.map((a) => a.id)).size).toBe(audit.length);
    expect(audit.map((a) => a.created_at)).toEqual(audit.map((a) => a.created_at).sort());
    expect(JSON.parse(files.get('manifest.json')!).tables.audit).toBe(audit.length);
    expect(files.get('audit.csv')).toBe(toCsv(audit));
  });

  it('fails an export with more records than the bound, with a clear message and nothing left behind', async () => {
    await swapWorker({ pageSize: PAGE, exportMaxRecords: 2 * PAGE + 1 });
    const job = await submit(admin, 'biosafety_export');
    const done = await finished(admin, job.id);
    // at once: a retry would read everything again to fail the same way
    expect(done).toMatchObject({ status: 'dead', result_path: null, attempts: 1, status_text: 'gave up: a retry would fail the same way' });
    expect(done.error_message).toBe(
      `export_too_large: the export has more than ${2 * PAGE + 1} records, the most one export may hold (JOBS_EXPORT_MAX_RECORDS); no partial export was produced`,
    );
    expect((await artifact(admin, job.id)).status).toBe(404);
    expect(await leftoversOf(job.id)).toEqual([]);
  });

  // reports draw from records held in memory; their free-form objects make a count
  // alone no bound on that memory
  it('fails a report whose records hold more JSON than the bound, at once', async () => {
    await swapWorker({ reportMaxBytes: 64 * 1024 });
    for (let i = 0; i < 3; i++)
      expect((await api('POST', '/v1/samples', admin, { name: `bulky ${i}`, metadata: { blob: 'x'.repeat(30_000) } })).status).toBe(201);
    const done = await finished(admin, (await submit(admin, 'box_layout_pdf', { rows: 1, cols: 1 })).id);
    expect(done).toMatchObject({ status: 'dead', result_path: null, attempts: 1 });
    expect(done.error_message).toMatch(/^too_many_records: the records to draw from hold more than 65536 bytes/);
    await swapWorker({});
    expect((await finished(admin, (await submit(admin, 'box_layout_pdf', { rows: 1, cols: 1 })).id)).status).toBe('succeeded');
  });

  it('removes the staged tables when the worker stops mid-export', async () => {
    await swapWorker({ pageSize: PAGE, stepDelayMs: 300 });
    const job = await submit(admin, 'org_data_export');
    // staging exists while the job runs
    await eventually(async () => ((await leftoversOf(job.id)).some((p) => p.startsWith(SCRATCH_DIR)) ? true : undefined));
    await worker!.stop();
    worker = undefined;
    expect((await api('GET', `/v1/jobs/${job.id}`, admin)).body.data.status).toBe('queued');
    expect(await leftoversOf(job.id)).toEqual([]);
    worker = await startWorker();
    expect(await finished(admin, job.id)).toMatchObject({ status: 'succeeded' });
  });
});

/**
 * gRPC calls open on the channels to the jobs service (this process's clients of
 * it: the gateway's), from grpc-js's channelz counters: started minus ended.
 */
async function openCallsToJobs(): Promise<number> {
  const port = stack.services.jobs!.split(':').pop()!;
  const { channel } = await new Promise<{ channel: { data: { target: string; calls_started: number; calls_succeeded: number; calls_failed: number } }[] }>(
    (resolve, reject) =>
      getChannelzHandlers().GetTopChannels(
        { request: { start_channel_id: 0, max_results: 1000 } } as never,
        // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- passes on grpc-js's error as it is
        ((err: unknown, res: never) => (err ? reject(err) : resolve(res))) as never,
      ),
  );
  return channel
    .filter((c) => c.data.target.endsWith(`:${port}`))
    .reduce((open, c) => open + c.data.calls_started - c.data.calls_succeeded - c.data.calls_failed, 0);
}

/** How many file descriptors of this process (the stack runs in it) have `path` open. */
async function openHandlesOf(path: string): Promise<number> {
  let n = 0;
  for (const fd of await readdir('/proc/self/fd')) {
    if ((await readlink(`/proc/self/fd/${fd}`).catch(() => '')) === path) n++;
  }
  return n;
}

describe('GET /v1/jobs/{id}/artifact', () => {
  it('ends the gRPC call when the client goes away while the download is held up by backpressure', async () => {
    const done = await finished(admin, (await submit(admin, 'box_layout_pdf', { rows: 1, cols: 1 })).id);
    // the PDF grown to 64 MiB (zeros): more than the socket buffers hold, so the
    // gateway's writes wait for the client
    await truncate(join(artifactDir, done.result_path), 64 * 1024 * 1024);
    await eventually(async () => ((await openCallsToJobs()) === 0 ? true : undefined));
    const req = await new Promise<ReturnType<typeof request>>((resolve, reject) => {
      const r = request(`${stack.url}/v1/jobs/${done.id}/artifact`, { headers: { authorization: `Bearer ${admin}` } }, (res) => {
        expect(res.statusCode).toBe(200);
        // read one piece, then stop reading: the gateway fills the buffers and waits
        res.once('data', () => {
          res.pause();
          resolve(r);
        });
      });
      r.on('error', reject);
      r.end();
    });
    // the buffers full: nothing more arrives on the socket between two looks
    let bytes = -1;
    await waitFor(
      'the download to stall on backpressure',
      () => {
        const now = req.socket!.bytesRead;
        const stalled = now === bytes;
        bytes = now;
        return stalled;
      },
      { intervalMs: 100 },
    );
    expect(await openCallsToJobs()).toBe(1);
    req.on('error', () => undefined);
    req.destroy();
    // a 'close' without 'drain' left the gateway waiting, the call open until its 10-minute deadline
    await eventually(async () => ((await openCallsToJobs()) === 0 ? true : undefined), 5_000);
    // and the jobs service let go of the file: its stream of the cancelled call waited
    // for a 'drain' that a destroyed stream never emits
    await eventually(async () => ((await openHandlesOf(join(artifactDir, done.result_path))) === 0 ? true : undefined), 5_000);
    expect((await artifact(admin, done.id)).bytes.length).toBe(64 * 1024 * 1024);
  });
});

describe('artifact retention', () => {
  it('removes artifacts past the retention; the job stays and says when', async () => {
    const db = worker!.deps.db;
    const old = await finished(admin, (await submit(admin, 'box_layout_pdf', { rows: 1, cols: 1 })).id);
    const recent = await finished(admin, (await submit(admin, 'box_layout_pdf', { rows: 1, cols: 1 })).id);
    await db.orm.execute(sql`update jobs.jobs set finished_at = now() - interval '31 days' where id = ${old.id}::uuid`);
    const files = new DirectoryFileStore(artifactDir);
    expect(await purgeExpiredArtifacts(db, files, 0)).toBe(0); // 0 keeps everything
    expect(existsSync(join(artifactDir, old.result_path))).toBe(true);

    expect(await purgeExpiredArtifacts(db, files, 30)).toBeGreaterThanOrEqual(1);
    expect(existsSync(join(artifactDir, old.result_path))).toBe(false);
    expect(existsSync(join(artifactDir, recent.result_path))).toBe(true);
    const after = (await api('GET', `/v1/jobs/${old.id}`, admin)).body.data;
    expect(after).toMatchObject({
      status: 'succeeded',
      result_path: null,
      result_meta: { content_type: 'application/pdf', artifact_deleted_at: expect.any(String) },
    });
    const gone = await artifact(admin, old.id);
    expect(gone.status).toBe(404);
    expect(gone.bytes.toString()).toContain('retention');
    expect((await artifact(admin, recent.id)).status).toBe(200);
  });

  it('removes the chunks of artifacts in PostgreSQL with their paths, and a file left in the directory from before the switch', async () => {
    const db = worker!.deps.db;
    const pgFiles = openFileStore(db, 'jobs', { kind: 'postgres', dir: artifactDir });
    const inDb = await finished(admin, (await submit(admin, 'box_layout_pdf', { rows: 1, cols: 1 })).id);
    const onDisk = await finished(admin, (await submit(admin, 'box_layout_pdf', { rows: 1, cols: 1 })).id);
    // the first one's artifact moved into the database (as an operator's move would), the second left on disk
    await pgFiles.put(inDb.result_path, createReadStream(join(artifactDir, inDb.result_path)));
    const chunks = async () =>
      Number(
        (
          await db.rows<{ n: string }>(
            sql`select count(*) as n from jobs.stored_file_chunks c join jobs.stored_files f on f.id = c.file_id where f.key = ${inDb.result_path}`,
          )
        )[0]!.n,
      );
    expect(await chunks()).toBeGreaterThan(0);
    await db.orm.execute(sql`update jobs.jobs set finished_at = now() - interval '31 days' where id = any(${sqlArray([inDb.id, onDisk.id])}::uuid[])`);
    expect(await purgeExpiredArtifacts(db, pgFiles, 30)).toBeGreaterThanOrEqual(2);
    expect(await chunks()).toBe(0);
    expect(await pgFiles.open(inDb.result_path)).toBeUndefined();
    expect(existsSync(join(artifactDir, onDisk.result_path))).toBe(false);
  });
});

describe('failures and workers', () => {
  it.each([
    ['the id of a record of another kind (a sample as entry_id)', () => data.sample!],
    ['an id no record has', () => randomUUID()],
  ])('a job whose input names %s fails once, naming the field, without retries', async (_what, id) => {
    const job = await submit(researcher, 'experiment_entry_pdf', { entry_id: id() });
    const done = await eventually(async () => {
      const j = (await api('GET', `/v1/jobs/${job.id}`, researcher)).body.data;
      return j.status === 'dead' ? j : undefined;
    }, 30_000);
    expect(done).toMatchObject({ attempts: 1, max_attempts: 3, finished_at: expect.any(String) });
    expect(done.error_message).toMatch(/^validation_failed: input\.entry_id names no experiments record/);
    expect((await artifact(researcher, job.id)).status).toBe(404);
  });

  it('a job whose worker is stopped mid-run is finished by another worker', async () => {
    const job = await submit(admin, 'org_data_export');
    await eventually(async () => ((await api('GET', `/v1/jobs/${job.id}`, admin)).body.data.status === 'running' ? true : undefined));
    await worker!.stop();
    const requeued = (await api('GET', `/v1/jobs/${job.id}`, admin)).body.data;
    expect(requeued.status).toBe('queued');
    worker = await startWorker();
    const done = await finished(admin, job.id);
    expect(done).toMatchObject({ status: 'succeeded', attempts: 1 });
  });

  // needs a second connection to the jobs schema: PostgreSQL only (the stack runs on PGlite without DATABASE_URL)
  (process.env.DATABASE_URL ? it : it.skip)('a job whose worker died (no heartbeat) goes back to the queue after the visibility timeout', async () => {
    await worker!.stop();
    const job = await submit(admin, 'box_layout_pdf', { rows: 1, cols: 1 });
    // what a worker that crashed mid-run leaves behind: running, attempt counted, heartbeat long gone
    const db = new pg.Client({ connectionString: stack.databaseUrl });
    await db.connect();
    try {
      await db.query(
        `update jobs.jobs set status = 'running', attempts = 1, worker_id = 'crashed', heartbeat_at = now() - interval '1 hour', started_at = now() where id = $1`,
        [job.id],
      );
    } finally {
      await db.end();
    }
    expect((await api('GET', `/v1/jobs/${job.id}`, admin)).body.data.status).toBe('running');
    worker = await startWorker({ visibilityMs: 1_000 });
    const done = await finished(admin, job.id);
    expect(done).toMatchObject({ status: 'succeeded', attempts: 2 });
  });
});

describe('GET /v1/realtime/background_jobs', () => {
  it("answers HEAD with the stream's headers at once, and the connection serves the next request", async () => {
    // Both requests on one connection: had HEAD opened the stream, the second would
    // wait behind it for ever (HTTP/1.1 answers a connection's requests in order).
    const answer = await rawExchange(
      stack.url,
      `HEAD /v1/realtime/background_jobs HTTP/1.1\r\nHost: lab\r\nAuthorization: Bearer ${researcher}\r\n\r\n` +
        'GET /v1/health HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n',
    );
    const [head, health] = answer.split(/(?=HTTP\/1\.1 )/);
    expect(head).toMatch(/^HTTP\/1\.1 200 OK\r\n[^]*Content-Type: text\/event-stream; charset=utf-8\r\n[^]*\r\n\r\n$/);
    expect(health).toMatch(/^HTTP\/1\.1 200 OK\r\n[^]*\r\n\r\n\{"status":"ok"\}$/);
  });

  it('streams the updates of a running job to its creator, not to another user', async () => {
    const open = (token: string) => {
      const ctl = new AbortController();
      const events: { status: string; id: string; progress: number }[] = [];
      let connected!: () => void;
      const ready = new Promise<void>((r) => (connected = r));
      const done = (async () => {
        const res = await fetch(`${stack.url}/v1/realtime/background_jobs`, { headers: { authorization: `Bearer ${token}` }, signal: ctl.signal });
        expect(res.status).toBe(200);
        expect(res.headers.get('content-type')).toContain('text/event-stream');
        const reader = res.body!.getReader();
        let buf = '';
        for (;;) {
          const { value, done: end } = await reader.read();
          if (end) break;
          connected();
          buf += Buffer.from(value).toString('utf8');
          let i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            const frame = buf.slice(0, i);
            buf = buf.slice(i + 2);
            if (frame.startsWith('event: job.updated'))
              events.push(
                JSON.parse(
                  frame
                    .split('\n')
                    .find((l) => l.startsWith('data: '))!
                    .slice(6),
                ),
              );
          }
        }
      })().catch((e: Error) => {
        if (e.name !== 'AbortError') throw e;
      });
      return { events, close: () => ctl.abort(), done, ready };
    };
    const mine = open(researcher);
    const theirs = open(other);
    await Promise.all([mine.ready, theirs.ready]); // both streams connected before the job exists
    const job = await submit(researcher, 'experiment_entry_pdf', { entry_id: data.entry });
    await eventually(async () => (mine.events.some((e) => e.id === job.id && e.status === 'succeeded') ? true : undefined), 30_000);
    mine.close();
    theirs.close();
    await Promise.all([mine.done, theirs.done]);
    const statuses = mine.events.filter((e) => e.id === job.id).map((e) => e.status);
    // The API publishes `queued` and the worker `running`, each from its own outbox: a
    // worker that claims the job at once can be first, and the stream then holds the
    // older `queued` back. What holds either way: the status never goes back.
    const lifecycle = ['queued', 'running', 'succeeded'];
    const ranks = statuses.map((s) => lifecycle.indexOf(s));
    expect(ranks).not.toContain(-1);
    expect(ranks).toEqual([...ranks].sort((a, b) => a - b));
    expect(statuses).toContain('running');
    expect(statuses[statuses.length - 1]).toBe('succeeded');
    const progress = mine.events.filter((e) => e.id === job.id && e.status === 'running').map((e) => e.progress);
    expect(progress).toEqual([...progress].sort((a, b) => a - b));
    expect(theirs.events.filter((e) => e.id === job.id)).toEqual([]);
  });
});
