import { createHash } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DomainError, isGuid } from '@lab/kit';
import { writeZip, type Artifact, type ZipEntry } from '../artifacts.js';
import type { InputOf } from '../job-types.js';
import type { JobRun } from '../reports.js';
import { withScratch } from '../scratch.js';
import type { Rec } from '../sources.js';
import { ELN_FORMAT_VERSION, ELN_MEDIA_TYPE, KIND, METADATA_FILE, PUBLISHER_ID, RO_CRATE_CONFORMS_TO, RO_CRATE_CONTEXT, ref, type Entity } from './crate.js';

/** Sample lookups for UUIDs an entry's content names: past this, the rest are not looked up. */
const MAX_SAMPLE_LOOKUPS = 1_000;

/**
 * The crate as it is written: each file goes to the job's scratch directory as
 * soon as it is made (hashed on the way), so memory holds the graph, not the
 * files.
 */
class CrateWriter {
  readonly graph: Entity[] = [];
  readonly entries: ZipEntry[] = [];
  private readonly persons = new Map<string, Entity>();
  private n = 0;

  constructor(
    private readonly scratch: string,
    readonly root: string,
  ) {}

  /** A JSON file of a dataset: written to scratch, described as a File entity. */
  async json(folder: string, name: string, value: unknown): Promise<Entity> {
    const bytes = Buffer.from(JSON.stringify(value, null, 2), 'utf8');
    const file = join(this.scratch, `${++this.n}.json`);
    await writeFile(file, bytes);
    this.entries.push({ name: `${this.root}/${folder}${name}`, file });
    const entity: Entity = {
      '@id': `${folder}${name}`,
      '@type': 'File',
      name,
      encodingFormat: 'application/json',
      contentSize: String(bytes.length),
      sha256: createHash('sha256').update(bytes).digest('hex'),
    };
    this.graph.push(entity);
    return entity;
  }

  person(userId: unknown): { '@id': string } | undefined {
    if (typeof userId !== 'string' || !userId) return undefined;
    const id = `#person-${userId}`;
    if (!this.persons.has(id)) {
      const p: Entity = { '@id': id, '@type': 'Person', identifier: userId };
      this.persons.set(id, p);
      this.graph.push(p);
    }
    return ref(id);
  }

  /** Names and emails of the Person entities, from identity (members who left keep their id only). */
  async namePersons(run: JobRun): Promise<void> {
    const ids = [...this.persons.values()].map((p) => String(p.identifier));
    for (let i = 0; i < ids.length; i += 200) {
      for (const m of await run.sources.members(run.caller, ids.slice(i, i + 200))) {
        const p = this.persons.get(`#person-${String(m.user_id)}`);
        if (!p) continue;
        if (m.name) p.name = m.name;
        if (m.email) p.email = m.email;
      }
    }
  }
}

/** The UUID strings anywhere in a value (an entry names its samples by id in its content). */
function uuidsIn(v: unknown, out: Set<string>): Set<string> {
  if (typeof v === 'string') {
    if (isGuid(v)) out.add(v.toLowerCase());
  } else if (Array.isArray(v)) for (const x of v) uuidsIn(x, out);
  else if (v && typeof v === 'object') for (const x of Object.values(v)) uuidsIn(x, out);
  return out;
}

/** A folder name from a display id or title: letters, digits, dot, dash and underscore only. */
const folderName = (s: string) => s.replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 80) || 'entry';

/**
 * The chains (an entry's versions, amendments included) of the experiments asked
 * for, each once, one at a time: a project's experiments are read a page at a
 * time, so memory holds a page and a chain, not the project.
 */
async function* chains(run: JobRun, input: InputOf<'eln_export'>): AsyncGenerator<Rec[]> {
  const seen = new Set<string>();
  const chainOf = async (id: string, field: string) => {
    run.checkpoint();
    const e = await run.sources.named(run.caller, 'experiments', id, field);
    if (seen.has(String(e.display_id))) return undefined;
    seen.add(String(e.display_id));
    if (seen.size > run.maxExportRecords) {
      throw new DomainError('too_large', 'export_too_large', `the export has more than ${run.maxExportRecords} experiments (JOBS_EXPORT_MAX_RECORDS)`);
    }
    return run.sources.versions(run.caller, id);
  };
  if (input.experiment_ids) {
    for (const [i, id] of input.experiment_ids.entries()) {
      const chain = await chainOf(id, `experiment_ids.${i}`);
      if (chain) yield chain;
    }
    return;
  }
  for await (const page of run.sources.pages(run.caller, 'experiments', { project_id: input.project_id! })) {
    for (const e of page) {
      const chain = seen.has(String(e.display_id)) ? undefined : await chainOf(String(e.id), 'project_id');
      if (chain) yield chain;
    }
  }
}

/**
 * An .eln archive of experiments (by id, or a project's): one Dataset folder per
 * entry with its latest version, every version (amendments) and each version's
 * signature manifest as JSON files; one Dataset per sample the entries name;
 * Person entities for authors and signers. Every File carries its size and
 * SHA-256, as the ELN Consortium's format asks.
 */
export async function elnExport(run: JobRun, input: InputOf<'eln_export'>): Promise<Artifact> {
  await run.step(5, 'loading the experiments');
  const project = input.project_id ? await run.sources.named(run.caller, 'projects', input.project_id, 'project_id') : undefined;
  // progress over the ids given; a project's count is known once read
  const expected = input.experiment_ids?.length;
  let count = 0;
  return withScratch(run.dir, run.jobId, async (scratch) => {
    const root = `eln-export-${run.jobId.slice(0, 8)}`;
    const w = new CrateWriter(scratch, root);
    const now = new Date().toISOString();
    const rootParts: { '@id': string }[] = [];
    const sampleRefs = new Map<string, { '@id': string }>();

    if (project) rootParts.push(await writeProject(w, project));

    await run.step(30, 'writing the experiments');
    const named = new Set<string>();
    for await (const versions of chains(run, input)) {
      run.checkpoint();
      // a chain always holds the version it was found by
      rootParts.push(await writeExperiment(run, w, versions, named, project ? rootParts[0] : undefined));
      count++;
      if (expected) await run.step(30 + Math.round((40 * count) / expected), `wrote ${count} of ${expected} experiments`);
      else if (count % 50 === 0) await run.step(50, `wrote ${count} experiments`);
    }

    await run.step(75, 'writing the samples');
    for (const id of [...named].slice(0, MAX_SAMPLE_LOOKUPS)) {
      run.checkpoint();
      const sample = await run.sources.get(run.caller, 'samples', id).catch((err: unknown) => {
        // a UUID in an entry's content that names no sample the creator may see is just text
        if (err instanceof DomainError && (err.kind === 'not_found' || err.kind === 'forbidden')) return undefined;
        throw err;
      });
      if (!sample) continue;
      const folder = await writeSample(w, id, sample);
      sampleRefs.set(id, folder);
      rootParts.push(folder);
    }
    for (const e of w.graph) {
      if (e.additionalType !== KIND.experiment) continue;
      const mentioned = (e.mentions as string[]).map((id) => sampleRefs.get(id)).filter((r) => r !== undefined);
      e.mentions = mentioned.length ? mentioned : undefined;
    }
    await w.namePersons(run);

    await run.step(85, 'writing the archive');
    const name = project ? `Experiments of ${String(project.name)}` : `${count} experiments`;
    const crate = crateOf(w, { name, jobId: run.jobId, now, hasPart: rootParts });
    const artifact = await writeZip(
      run.files,
      `${run.base}.eln`,
      [{ name: `${root}/${METADATA_FILE}`, content: JSON.stringify(crate, null, 2) }, ...w.entries],
      count + sampleRefs.size,
    );
    return { path: artifact.path, meta: { ...artifact.meta, content_type: ELN_MEDIA_TYPE } };
  });
}

/** The project's Dataset folder: its record as project.json. */
async function writeProject(w: CrateWriter, project: Rec): Promise<{ '@id': string }> {
  const folder = `project-${folderName(String(project.name))}/`;
  const file = await w.json(folder, 'project.json', project);
  w.graph.push({
    '@id': folder,
    '@type': 'Dataset',
    additionalType: KIND.project,
    genre: 'project',
    name: project.name,
    description: project.description ?? undefined,
    identifier: project.id,
    keywords: (project.tags as string[] | undefined)?.join(', '),
    dateCreated: project.created_at,
    dateModified: project.updated_at,
    author: w.person(project.lead_researcher_id ?? project.created_by),
    hasPart: [ref(file['@id'])],
  });
  return ref(folder);
}

/**
 * One entry's Dataset folder: its latest version, every version (amendments) and
 * each version's signature manifest. The UUIDs its versions' content holds are
 * added to `named` (the samples to look up); its `mentions` keep them until the
 * samples are written.
 */
async function writeExperiment(run: JobRun, w: CrateWriter, versions: Rec[], named: Set<string>, project: { '@id': string } | undefined) {
  const latest = versions[versions.length - 1]!;
  const first = versions[0]!;
  const folder = `experiments/${folderName(String(latest.display_id))}/`;
  const signatures: Record<string, Rec[]> = {};
  for (const v of versions) {
    signatures[String(v.id)] = await run.sources.signatures(run.caller, String(v.id));
    uuidsIn(v.content, named);
  }
  const files = [
    await w.json(folder, 'experiment.json', latest),
    await w.json(folder, 'versions.json', versions),
    await w.json(folder, 'signatures.json', signatures),
  ];
  const signers = Object.values(signatures)
    .flat()
    .map((s) => w.person(s.signer_id))
    .filter((p) => p !== undefined);
  w.graph.push({
    '@id': folder,
    '@type': 'Dataset',
    additionalType: KIND.experiment,
    genre: 'experiment',
    name: latest.title ?? latest.display_id,
    identifier: latest.display_id,
    description: latest.description ?? undefined,
    text: latest.description ?? undefined,
    keywords: (latest.tags as string[]).join(', '),
    creativeWorkStatus: latest.status,
    version: String(latest.version),
    dateCreated: first.created_at,
    dateModified: latest.updated_at,
    author: w.person(latest.author_id ?? latest.created_by),
    contributor: signers.length ? signers : undefined,
    isPartOf: project,
    hasPart: files.map((f) => ref(f['@id'])),
    // the samples, once written: filled in after the lookups
    mentions: [
      ...uuidsIn(
        versions.map((v) => v.content),
        new Set(),
      ),
    ],
  });
  return ref(folder);
}

/** A sample's Dataset folder: its record as sample.json. */
async function writeSample(w: CrateWriter, id: string, sample: Rec): Promise<{ '@id': string }> {
  const folder = `samples/${id}/`;
  const file = await w.json(folder, 'sample.json', sample);
  w.graph.push({
    '@id': folder,
    '@type': 'Dataset',
    additionalType: KIND.sample,
    genre: 'sample',
    name: sample.name,
    identifier: sample.id,
    description: sample.type ?? undefined,
    creativeWorkStatus: sample.status,
    dateCreated: sample.created_at,
    dateModified: sample.updated_at,
    author: w.person(sample.owner_id ?? sample.created_by),
    hasPart: [ref(file['@id'])],
  });
  return ref(folder);
}

/** ro-crate-metadata.json: the descriptor, the root Dataset, the publisher and every entity written. */
function crateOf(w: CrateWriter, root: { name: string; jobId: string; now: string; hasPart: { '@id': string }[] }) {
  const { name, jobId, now, hasPart } = root;
  return {
    '@context': RO_CRATE_CONTEXT,
    '@graph': [
      {
        '@id': METADATA_FILE,
        '@type': 'CreativeWork',
        about: ref('./'),
        conformsTo: ref(RO_CRATE_CONFORMS_TO),
        dateCreated: now,
        sdPublisher: ref(PUBLISHER_ID),
        version: ELN_FORMAT_VERSION,
      },
      {
        '@id': './',
        '@type': 'Dataset',
        name,
        description: `Export of job ${jobId}`,
        identifier: jobId,
        datePublished: now,
        dateCreated: now,
        sdPublisher: ref(PUBLISHER_ID),
        version: ELN_FORMAT_VERSION,
        hasPart,
      },
      { '@id': PUBLISHER_ID, '@type': 'Organization', name: 'lab notebook service' },
      ...w.graph,
    ],
  };
}
