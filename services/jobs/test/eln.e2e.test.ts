import { createHash, randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import yauzl from 'yauzl';
import { ZipFile } from 'yazl';
import type { RunningService } from '@lab/kit';
import { startStack, type Stack } from '@lab/testing';
import { call, eventually } from '../../gateway/test/http';
import { CRATE_BASE64_CHARS, ELN_LIMITS } from '../src/eln/limits';
import { startJobsWorker } from './worker';

/**
 * The .eln exchange format through the gateway: an export from one organisation
 * checked against the ELN Consortium's rules (validator below), imported into
 * another with the same content; an archive shaped like another ELN's export;
 * hostile archives refused with nothing written.
 */
let stack: Stack;
let artifactDir: string;
let worker: RunningService | undefined;
const PASSWORD = 'correct horse battery staple';

interface Org {
  id: string;
  token: string;
  auditor: string;
}
let a: Org;
let b: Org;
let c: Org;
const ids: Record<string, string> = {};

const api = (method: string, path: string, token: string, body?: unknown, headers?: Record<string, string>) =>
  call(stack.url, method, path, { token, body, headers });

async function org(name?: string): Promise<Org & { email: string }> {
  const id = (await stack.admin.createOrg({ rate_limit: { per_minute: 100_000, per_hour: 1_000_000 } })).id;
  const email = `eln-${randomUUID()}@example.test`;
  const u = await stack.admin.createUser({ email, password: PASSWORD, ...(name ? { name } : {}) });
  await stack.admin.putMember(id, u.id, 'researcher');
  const token = (await stack.admin.createPat(u.id, { scopes: ['read', 'write'], org_id: id })).token;
  const auditor = (await stack.admin.createApiKey(id, { scopes: ['read', 'audit:read'] })).token;
  return { id, token, auditor, email };
}

async function created(token: string, path: string, body: unknown): Promise<Record<string, unknown>> {
  const r = await api('POST', path, token, body);
  if (r.status !== 201) throw new Error(`${path}: ${r.status} ${r.text}`);
  return r.body.data;
}

beforeAll(async () => {
  artifactDir = await mkdtemp(join(tmpdir(), 'lab-eln-'));
  process.env.JOBS_ROLE = 'api';
  process.env.JOBS_ARTIFACT_DIR = artifactDir;
  stack = await startStack({ services: ['identity', 'audit', 'notebook', 'jobs'] });
  delete process.env.JOBS_ROLE;
  const first = await org('Ada Lovelace');
  a = first;
  b = await org();
  c = await org();

  const s1 = await created(a.token, '/v1/samples', { name: 'Lysate L-1', type: 'lysate', metadata: { position: 'B2', volume_ul: 250 } });
  const s2 = await created(a.token, '/v1/samples', { name: 'Buffer B-7', storage_location: 'Fridge 2' });
  ids.s1 = String(s1.id);
  ids.s2 = String(s2.id);
  const e1 = await created(a.token, '/v1/experiments', {
    title: 'Lactase kinetics',
    description: 'Michaelis-Menten at 37 °C',
    tags: ['enzymes', 'kinetics'],
    content: { steps: ['mix', 'measure'], sample: ids.s1, inputs: [{ sample_id: ids.s2, ul: 10 }], km_mM: 2.4 },
  });
  ids.e1 = String(e1.id);
  // signed, then amended: two versions, the first with its manifest
  const session = (await call(stack.url, 'POST', '/auth/v1/token', { body: { grant_type: 'password', email: first.email, password: PASSWORD } })).body
    .access_token as string;
  const signed = await call(stack.url, 'POST', `/app/v1/experiments/${ids.e1}/sign`, {
    token: session,
    body: { password: PASSWORD },
    headers: { 'x-org-id': a.id },
  });
  if (signed.status !== 200 && signed.status !== 201) throw new Error(`sign: ${signed.status} ${signed.text}`);
  const amended = await created(a.token, `/v1/experiments/${ids.e1}/amendments`, {
    reason: 'Km recalculated',
    content: { ...(e1.content as object), km_mM: 2.6 },
  });
  ids.e1v2 = String(amended.id);
  ids.e2 = String((await created(a.token, '/v1/experiments', { title: 'Plain entry', content: {} })).id);
  ids.project = String((await created(a.token, '/v1/projects', { name: 'Dairy enzymes', tags: ['dairy'] })).id);
  ids.e3 = String((await created(a.token, '/v1/experiments', { title: 'In the project', project_id: ids.project, content: { note: 'x' } })).id);
  worker = await startJobsWorker(stack, { artifactDir });
});

afterAll(async () => {
  await worker?.stop();
  await stack?.stop();
  await rm(artifactDir, { recursive: true, force: true });
  delete process.env.JOBS_ARTIFACT_DIR;
});

async function runJob(token: string, job_type: string, input: unknown) {
  const r = await api('POST', '/v1/jobs', token, { job_type, input });
  if (r.status !== 202) throw new Error(`${job_type}: ${r.status} ${r.text}`);
  const id = r.body.data.id as string;
  return eventually(async () => {
    const j = (await api('GET', `/v1/jobs/${id}`, token)).body.data;
    return j.status === 'succeeded' || j.status === 'dead' ? j : undefined;
  }, 60_000);
}

async function download(token: string, jobId: string) {
  const res = await fetch(`${stack.url}/v1/jobs/${jobId}/artifact`, { headers: { authorization: `Bearer ${token}` } });
  expect(res.status).toBe(200);
  return { type: res.headers.get('content-type'), bytes: Buffer.from(await res.arrayBuffer()) };
}

/** Every entry of a ZIP: name, bytes, and whether it is a folder. */
function unzip(bytes: Buffer): Promise<Map<string, Buffer>> {
  return new Promise((resolve, reject) =>
    yauzl.fromBuffer(bytes, { lazyEntries: true }, (err, zip) => {
      if (err || !zip) {
        reject(err ?? new Error('no zip'));
        return;
      }
      const out = new Map<string, Buffer>();
      zip.on('entry', (e: yauzl.Entry) => {
        if (e.fileName.endsWith('/')) {
          out.set(e.fileName, Buffer.alloc(0));
          zip.readEntry();
          return;
        }
        zip.openReadStream(e, (e2, s) => {
          if (e2 || !s) {
            reject(e2 ?? new Error('no stream'));
            return;
          }
          const parts: Buffer[] = [];
          s.on('data', (p: Buffer) => parts.push(p));
          s.on('end', () => {
            out.set(e.fileName, Buffer.concat(parts));
            zip.readEntry();
          });
        });
      });
      zip.on('end', () => resolve(out));
      zip.on('error', reject);
      zip.readEntry();
    }),
  );
}

type Entity = Record<string, any> & { '@id': string };
const refs = (v: unknown): string[] => (Array.isArray(v) ? v : v === undefined ? [] : [v]).map((x) => (typeof x === 'string' ? x : x['@id']));
const types = (e: Entity): string[] => (Array.isArray(e['@type']) ? e['@type'] : [e['@type']]);

/**
 * The ELN Consortium's rules (SPECIFICATION.md) and RO-Crate 1.1's, as checks:
 * one root folder holding ro-crate-metadata.json; the metadata descriptor about
 * ./ conforming to RO-Crate 1.1, with sdPublisher and the format's version; the
 * root Dataset with name, description, datePublished and hasPart; every hasPart
 * resolving to an entity; every File in the ZIP with its contentSize and
 * sha256; folders as Datasets whose @id ends with /; authors as Person entities.
 * Returns the problems found (none for a valid archive) and the graph.
 */
async function validateEln(bytes: Buffer): Promise<{ problems: string[]; graph: Map<string, Entity>; root: string }> {
  const problems: string[] = [];
  const entries = await unzip(bytes);
  const roots = new Set([...entries.keys()].map((n) => n.split('/')[0]));
  if (roots.size !== 1) problems.push(`${roots.size} folders at the root`);
  const [root] = [...roots];
  for (const n of entries.keys()) if (!n.includes('/')) problems.push(`${n} outside the root folder`);
  const meta = entries.get(`${root}/ro-crate-metadata.json`);
  if (!meta) return { problems: [...problems, 'no ro-crate-metadata.json'], graph: new Map(), root };
  const doc = JSON.parse(meta.toString('utf8'));
  if (doc['@context'] !== 'https://w3id.org/ro/crate/1.1/context') problems.push('@context is not RO-Crate 1.1');
  const graph = new Map<string, Entity>((doc['@graph'] as Entity[]).map((e) => [e['@id'], e]));
  const d = graph.get('ro-crate-metadata.json');
  if (!d) problems.push('no metadata descriptor');
  else {
    if (!types(d).includes('CreativeWork')) problems.push('descriptor is not a CreativeWork');
    if (d.about?.['@id'] !== './') problems.push('descriptor is not about ./');
    if (d.conformsTo?.['@id'] !== 'https://w3id.org/ro/crate/1.1') problems.push('descriptor does not conform to RO-Crate 1.1');
    if (!d.sdPublisher || !graph.has(d.sdPublisher['@id'])) problems.push('descriptor has no sdPublisher entity');
    if (!d.version) problems.push('descriptor has no version');
  }
  const r = graph.get('./');
  if (!r || !types(r).includes('Dataset')) problems.push('no root Dataset ./');
  else for (const k of ['name', 'description', 'datePublished', 'hasPart', 'sdPublisher', 'version']) if (!r[k]) problems.push(`root Dataset has no ${k}`);
  const reachable = new Set<string>();
  const walk = (e: Entity) => {
    for (const id of refs(e.hasPart)) {
      const part = graph.get(id);
      if (!part) problems.push(`hasPart ${id} of ${e['@id']} names no entity`);
      else if (!reachable.has(id)) {
        reachable.add(id);
        walk(part);
      }
    }
  };
  if (r) walk(r);
  for (const e of graph.values()) {
    if (types(e).includes('File')) {
      const b = entries.get(`${root}/${e['@id']}`);
      if (!b) problems.push(`File ${e['@id']} is not in the archive`);
      else {
        if (String(e.contentSize) !== String(b.length)) problems.push(`File ${e['@id']} contentSize ${e.contentSize} != ${b.length}`);
        if (e.sha256 !== createHash('sha256').update(b).digest('hex')) problems.push(`File ${e['@id']} sha256 differs`);
      }
      if (!reachable.has(e['@id'])) problems.push(`File ${e['@id']} is not reached from ./ by hasPart`);
    }
    if (types(e).includes('Dataset') && e['@id'] !== './') {
      if (!e['@id'].endsWith('/')) problems.push(`Dataset ${e['@id']} does not end with /`);
      if (!reachable.has(e['@id'])) problems.push(`Dataset ${e['@id']} is not reached from ./`);
      if (!e.dateCreated || !e.dateModified) problems.push(`Dataset ${e['@id']} has no dateCreated/dateModified`);
      for (const p of refs(e.author)) if (!graph.get(p) || !types(graph.get(p)!).includes('Person')) problems.push(`author ${p} is not a Person`);
    }
  }
  return { problems, graph, root };
}

/** The export of the first test, made again when that test is not run. */
let exported: Buffer | undefined;

describe('eln_export', () => {
  it('exports chosen experiments with versions, signatures and the samples they name, valid by the specification', async () => {
    const job = await runJob(a.token, 'eln_export', { experiment_ids: [ids.e1, ids.e2] });
    expect(job.status).toBe('succeeded');
    expect(job.result_meta.content_type).toBe('application/vnd.eln+zip');
    const { type, bytes } = await download(a.token, job.id);
    expect(type).toContain('application/vnd.eln+zip');
    exported = bytes;
    const { problems, graph, root } = await validateEln(bytes);
    expect(problems).toEqual([]);
    const datasets = [...graph.values()].filter((e) => types(e).includes('Dataset') && e['@id'] !== './');
    expect(
      datasets
        .filter((e) => e.additionalType === 'Experiment')
        .map((e) => e.name)
        .sort(),
    ).toEqual(['Lactase kinetics', 'Plain entry']);
    expect(
      datasets
        .filter((e) => e.additionalType === 'Sample')
        .map((e) => e.name)
        .sort(),
    ).toEqual(['Buffer B-7', 'Lysate L-1']);
    const lactase = datasets.find((e) => e.name === 'Lactase kinetics')!;
    expect(refs(lactase.mentions).length).toBe(2);
    expect(graph.get(refs(lactase.author)[0])).toMatchObject({ '@type': 'Person', name: 'Ada Lovelace' });
    const files = await unzip(bytes);
    const folder = `${root}/${lactase['@id']}`;
    const versions = JSON.parse(files.get(`${folder}versions.json`)!.toString());
    expect(versions.map((v: any) => [v.version, v.amendment_reason ?? null])).toEqual([
      [1, null],
      [2, 'Km recalculated'],
    ]);
    const signatures = JSON.parse(files.get(`${folder}signatures.json`)!.toString());
    expect(signatures[ids.e1].map((s: any) => s.meaning)).toEqual(['authorship']);
    expect(JSON.parse(files.get(`${folder}experiment.json`)!.toString()).id).toBe(ids.e1v2);
  });

  it('exports a project: its experiments and the project as a Dataset', async () => {
    const job = await runJob(a.token, 'eln_export', { project_id: ids.project });
    expect(job.status).toBe('succeeded');
    const { problems, graph } = await validateEln((await download(a.token, job.id)).bytes);
    expect(problems).toEqual([]);
    const datasets = [...graph.values()].filter((e) => types(e).includes('Dataset') && e['@id'] !== './');
    expect(datasets.map((e) => [e.additionalType, e.name]).sort()).toEqual([
      ['Experiment', 'In the project'],
      ['Project', 'Dairy enzymes'],
    ]);
  });

  it('refuses an input naming both, or neither (400)', async () => {
    for (const input of [{}, { experiment_ids: [ids.e1], project_id: ids.project }]) {
      const r = await api('POST', '/v1/jobs', a.token, { job_type: 'eln_export', input });
      expect([r.status, r.body.error.code]).toEqual([400, 'validation_failed']);
    }
  });
});

const list = async (token: string, resource: string) => (await api('GET', `/v1/${resource}?limit=500`, token)).body.data as Record<string, any>[];
const withoutImport = ({ eln_import: _, ...rest }: Record<string, unknown>) => rest;

describe('eln_import', () => {
  it('imports an export into another organisation with the same content, every record audited', async () => {
    exported ??= (await download(a.token, (await runJob(a.token, 'eln_export', { experiment_ids: [ids.e1, ids.e2] })).id)).bytes;
    const job = await runJob(b.token, 'eln_import', { crate_base64: exported.toString('base64'), filename: 'lactase.eln' });
    expect([job.status, job.error_message]).toEqual(['succeeded', null]);
    const report = JSON.parse((await download(b.token, job.id)).bytes.toString());
    expect(report.created.experiments).toHaveLength(2);
    expect(report.created.samples).toHaveLength(2);

    const samples = await list(b.token, 'samples');
    const byName = new Map(samples.map((s) => [s.name, s]));
    expect(byName.get('Lysate L-1')).toMatchObject({ type: 'lysate', metadata: { position: 'B2', volume_ul: 250 } });
    expect(byName.get('Buffer B-7')).toMatchObject({ storage_location: 'Fridge 2' });
    const original = (await api('GET', `/v1/experiments/${ids.e1v2}`, a.token)).body.data;
    const entries = await list(b.token, 'experiments');
    const lactase = entries.find((e) => e.title === 'Lactase kinetics')!;
    expect(lactase).toMatchObject({ description: original.description, tags: original.tags, status: original.status });
    // the same content, its sample ids those of the samples made in this organisation
    expect(withoutImport(lactase.content)).toEqual({
      ...original.content,
      sample: byName.get('Lysate L-1')!.id,
      inputs: [{ sample_id: byName.get('Buffer B-7')!.id, ul: 10 }],
    });
    const kept = lactase.content.eln_import;
    const first = (await api('GET', `/v1/experiments/${ids.e1}`, a.token)).body.data;
    expect(kept.date_created).toBe(first.created_at);
    expect(kept.date_modified).toBe(original.updated_at);
    expect(kept.author.name).toBe('Ada Lovelace');
    expect(kept.versions).toHaveLength(2);
    expect(kept.signatures[ids.e1][0].meaning).toBe('authorship');
    expect(entries.find((e) => e.title === 'Plain entry')).toBeDefined();

    const made = [...report.created.experiments, ...report.created.samples].map((r: any) => r.id);
    const audit = await eventually(async () => {
      const entries = (await api('GET', '/v1/audit?limit=1000', b.auditor)).body.data as { record_id: string; action: string; after: any }[];
      const audited = new Set(entries.filter((x) => x.action === 'create').map((x) => x.record_id));
      return made.every((id) => audited.has(id)) ? entries : undefined;
    }, 30_000);
    // the job's own entry names the archive by its length, without its bytes
    expect(audit.find((x) => x.record_id === job.id)?.after.input).toEqual({ filename: 'lactase.eln', crate_base64_chars: exported.toString('base64').length });
  });

  it("imports another ELN's archive: nested datasets, text body, keywords, unknown entities kept", async () => {
    const csv = Buffer.from('t,abs\n0,0.01\n30,0.42\n');
    const raw = Buffer.from([0, 1, 2, 3, 255]);
    const sha = (x: Buffer) => createHash('sha256').update(x).digest('hex');
    const crate = {
      '@context': 'https://w3id.org/ro/crate/1.1/context',
      '@graph': [
        {
          '@id': 'ro-crate-metadata.json',
          '@type': 'CreativeWork',
          about: { '@id': './' },
          conformsTo: { '@id': 'https://w3id.org/ro/crate/1.1' },
          dateCreated: '2024-03-01T10:00:00+0100',
          sdPublisher: { '@type': 'Organization', name: 'eLabFTW', url: 'https://www.elabftw.net' },
          version: '1.0',
        },
        // every folder and file listed at the root too, as the specification's example does
        {
          '@id': './',
          '@type': ['Dataset'],
          hasPart: [
            './2024-02-29 - Growth curve/',
            './2024-02-29 - Growth curve/od.csv',
            './2024-02-29 - Growth curve/raw/',
            './2024-02-29 - Growth curve/raw/reader.bin',
          ],
        },
        {
          '@id': './2024-02-29 - Growth curve/',
          '@type': 'Dataset',
          author: { '@id': 'https://orcid.org/0000-0002-1825-0097' },
          dateCreated: '2024-02-29T16:17:38+01:00',
          dateModified: '2024-03-01T09:00:00+01:00',
          name: 'Growth curve',
          text: '<h1>Goal</h1><p>OD600 of E. coli</p>',
          keywords: 'microbiology,growth, OD600',
          url: 'https://elab.example.org/experiments.php?mode=view&id=256',
          comment: [{ '@id': 'comment://1' }],
          variableMeasured: [{ '@id': 'pv://1' }],
          hasPart: [{ '@id': './2024-02-29 - Growth curve/od.csv' }, { '@id': './2024-02-29 - Growth curve/raw/' }],
        },
        {
          '@id': './2024-02-29 - Growth curve/od.csv',
          '@type': 'File',
          name: 'od.csv',
          encodingFormat: 'text/csv',
          contentSize: String(csv.length),
          sha256: sha(csv),
        },
        { '@id': './2024-02-29 - Growth curve/raw/', '@type': 'Dataset', name: 'raw', hasPart: [{ '@id': './2024-02-29 - Growth curve/raw/reader.bin' }] },
        { '@id': './2024-02-29 - Growth curve/raw/reader.bin', '@type': 'File', contentSize: raw.length, sha256: sha(raw) },
        { '@id': 'https://orcid.org/0000-0002-1825-0097', '@type': 'Person', givenName: 'Josiah', familyName: 'Carberry' },
        { '@id': 'comment://1', '@type': 'Comment', text: 'looks good', dateCreated: '2024-03-01T08:00:00+01:00' },
        { '@id': 'pv://1', '@type': 'PropertyValue', propertyID: 'temperature', value: 37, unitText: '°C' },
        { '@id': '#instrument', '@type': 'IndividualProduct', name: 'Plate reader' },
      ],
    };
    const bytes = await zipOf([
      { name: 'export-elabftw/ro-crate-metadata.json', content: Buffer.from(JSON.stringify(crate)) },
      { name: 'export-elabftw/2024-02-29 - Growth curve/od.csv', content: csv },
      { name: 'export-elabftw/2024-02-29 - Growth curve/raw/reader.bin', content: raw },
    ]);
    const job = await runJob(c.token, 'eln_import', { crate_base64: bytes.toString('base64') });
    expect([job.status, job.error_message]).toEqual(['succeeded', null]);
    const report = JSON.parse((await download(c.token, job.id)).bytes.toString());
    expect(report.created.experiments.map((x: any) => x.source)).toEqual(['./2024-02-29 - Growth curve/']);
    const [entry] = (await list(c.token, 'experiments')).filter((e) => e.title === 'Growth curve');
    expect(entry).toMatchObject({ description: '<h1>Goal</h1><p>OD600 of E. coli</p>', tags: ['microbiology', 'growth', 'OD600'] });
    const kept = entry!.content.eln_import;
    expect(kept).toMatchObject({
      date_created: '2024-02-29T16:17:38+01:00',
      date_modified: '2024-03-01T09:00:00+01:00',
      author: { name: 'Josiah Carberry' },
      published_by: 'eLabFTW',
      properties: { url: 'https://elab.example.org/experiments.php?mode=view&id=256' },
    });
    expect(kept.entities.map((e: Entity) => e['@type']).sort()).toEqual(['Comment', 'PropertyValue']);
    expect(kept.files.map((f: any) => [f.path, f.size, f.in_archive])).toEqual([
      ['2024-02-29 - Growth curve/od.csv', csv.length, true],
      ['2024-02-29 - Growth curve/raw/reader.bin', raw.length, true],
    ]);
    expect(Buffer.from(kept.files[1].data_base64, 'base64')).toEqual(raw);
  });
});

/** A ZIP of the given entries (mode: a Unix mode, e.g. a symbolic link's). */
function zipOf(entries: { name: string; content: Buffer; mode?: number }[]): Promise<Buffer> {
  const zip = new ZipFile();
  for (const e of entries) zip.addBuffer(e.content, e.name, e.mode ? { mode: e.mode } : {});
  zip.end();
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    zip.outputStream.on('data', (p: Buffer) => parts.push(p));
    zip.outputStream.on('end', () => resolve(Buffer.concat(parts)));
    zip.outputStream.on('error', reject);
  });
}

/** Every occurrence of `from` in the archive's bytes replaced by `to` (same length): names yazl will not write. */
function patched(bytes: Buffer, from: string, to: string): Buffer {
  const out = Buffer.from(bytes);
  for (let i = out.indexOf(from); i !== -1; i = out.indexOf(from, i + 1)) out.write(to, i, 'latin1');
  return out;
}

/** The central directory's record of the entry named `name`: its fields are patched to lie. */
function centralRecord(bytes: Buffer, name: string): number {
  for (let i = bytes.indexOf(Buffer.from([0x50, 0x4b, 0x01, 0x02])); i !== -1; i = bytes.indexOf(Buffer.from([0x50, 0x4b, 0x01, 0x02]), i + 1)) {
    const len = bytes.readUInt16LE(i + 28);
    if (bytes.toString('latin1', i + 46, i + 46 + len) === name) return i;
  }
  throw new Error(`no central record for ${name}`);
}

const goodMeta = Buffer.from(
  JSON.stringify({
    '@context': 'https://w3id.org/ro/crate/1.1/context',
    '@graph': [
      { '@id': 'ro-crate-metadata.json', '@type': 'CreativeWork', about: { '@id': './' }, conformsTo: { '@id': 'https://w3id.org/ro/crate/1.1' } },
      { '@id': './', '@type': 'Dataset', hasPart: [{ '@id': 'e/' }] },
      { '@id': 'e/', '@type': 'Dataset', name: 'must never be written' },
    ],
  }),
);
const meta = { name: 'crate/ro-crate-metadata.json', content: goodMeta };

describe('hostile archives: refused with a reason, nothing written', () => {
  const cases: [string, () => Promise<Buffer>, string][] = [
    [
      'an entry climbing out of the root folder',
      async () => patched(await zipOf([meta, { name: 'crate/xx/xx/evil.txt', content: Buffer.from('x') }]), 'crate/xx/xx/', 'crate/../../'),
      'eln_unsafe_entry',
    ],
    [
      'an absolute path',
      async () => patched(await zipOf([meta, { name: '_etc/cron.d/evil', content: Buffer.from('x') }]), '_etc/cron.d/', '/etc/cron.d/'),
      'eln_unsafe_entry',
    ],
    ['a symbolic link', () => zipOf([meta, { name: 'crate/e/link', content: Buffer.from('/etc/passwd'), mode: 0o120777 }]), 'eln_unsafe_entry'],
    ['a compression bomb (ratio)', () => zipOf([meta, { name: 'crate/e/zeros.bin', content: Buffer.alloc(20 * 1024 * 1024) }]), 'eln_too_large'],
    [
      'an entry larger than it declares',
      async () => {
        const z = await zipOf([meta, { name: 'crate/e/data.txt', content: Buffer.from('a'.repeat(5000)) }]);
        z.writeUInt32LE(10, centralRecord(z, 'crate/e/data.txt') + 24);
        return z;
      },
      'eln_corrupt_entry',
    ],
    [
      'too many entries',
      async () => {
        const z = await zipOf([meta]);
        const end = z.lastIndexOf(Buffer.from([0x50, 0x4b, 0x05, 0x06]));
        z.writeUInt16LE(ELN_LIMITS.entries + 1, end + 8);
        z.writeUInt16LE(ELN_LIMITS.entries + 1, end + 10);
        return z;
      },
      'eln_too_large',
    ],
    ['metadata that is not JSON', () => zipOf([{ name: meta.name, content: Buffer.from('{"@graph": [') }]), 'eln_malformed_metadata'],
    ['JSON-LD without a root dataset', () => zipOf([{ name: meta.name, content: Buffer.from('{"@graph": [{"@id": "x"}]}') }]), 'eln_malformed_metadata'],
    [
      'JSON-LD nested 100,000 levels deep',
      () => zipOf([{ name: meta.name, content: Buffer.from(`{"@graph": [{"@id": "x", "deep": ${'['.repeat(100_000)}${']'.repeat(100_000)}}]}`) }]),
      'eln_malformed_metadata',
    ],
    ['two folders at the root', () => zipOf([meta, { name: 'other/file.txt', content: Buffer.from('x') }]), 'eln_no_root_folder'],
    ['no metadata', () => zipOf([{ name: 'crate/e/file.txt', content: Buffer.from('x') }]), 'eln_no_metadata'],
    ['not a ZIP', async () => Buffer.from('this is not an archive at all'), 'eln_not_a_zip'],
    [
      'a file whose hash is not the one stated',
      () =>
        zipOf([
          {
            name: meta.name,
            content: Buffer.from(
              JSON.stringify({
                '@graph': [
                  { '@id': 'ro-crate-metadata.json', about: { '@id': './' } },
                  { '@id': './', '@type': 'Dataset', hasPart: [{ '@id': 'e/' }] },
                  { '@id': 'e/', '@type': 'Dataset', name: 'x', hasPart: [{ '@id': 'e/f.txt' }] },
                  { '@id': 'e/f.txt', '@type': 'File', sha256: '0'.repeat(64) },
                ],
              }),
            ),
          },
          { name: 'crate/e/f.txt', content: Buffer.from('x') },
        ]),
      'eln_file_mismatch',
    ],
  ];

  it.each(cases)('%s', async (_what, build, code) => {
    const bytes = await build();
    const job = await runJob(c.token, 'eln_import', { crate_base64: bytes.toString('base64') });
    expect(job.status).toBe('dead');
    expect(job.attempts).toBe(1);
    expect(job.error_message).toContain(code);
    expect((await list(c.token, 'experiments')).filter((e) => e.title === 'must never be written')).toEqual([]);
    expect((await list(c.token, 'samples')).length).toBe(0);
  });

  it('refuses an import to a role that cannot write (403), before any job exists', async () => {
    const u = await stack.admin.createUser();
    await stack.admin.putMember(c.id, u.id, 'viewer');
    const viewer = (await stack.admin.createPat(u.id, { scopes: ['read', 'write'], org_id: c.id })).token;
    const r = await api('POST', '/v1/jobs', viewer, { job_type: 'eln_import', input: { crate_base64: 'UEsFBgAAAAAAAAAAAAAAAAAAAAAAAA==' } });
    expect([r.status, r.body.error.code]).toEqual([403, 'forbidden']);
    expect(r.body.error.message).toContain('eln_import');
  });

  it('refuses a crate over the upload limit when the job is asked for (400), and the worker goes on', async () => {
    const r = await api('POST', '/v1/jobs', c.token, { job_type: 'eln_import', input: { crate_base64: 'A'.repeat(CRATE_BASE64_CHARS + 4) } });
    expect([r.status, r.body.error.code]).toEqual([400, 'validation_failed']);
    expect(JSON.stringify(r.body.error.details)).toContain('input.crate_base64');
    // the worker stays healthy after every refusal: an export still runs
    const job = await runJob(a.token, 'eln_export', { experiment_ids: [ids.e2] });
    expect(job.status).toBe('succeeded');
  });
});
