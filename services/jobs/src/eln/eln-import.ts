import { createHash } from 'node:crypto';
import { DomainError, isGuid, jsonProblem } from '@lab/kit';
import type { Artifact } from '../artifacts.js';
import type { InputOf } from '../job-types.js';
import type { JobRun } from '../reports.js';
import type { Rec } from '../sources.js';
import { KIND, pathOfId, refIds, typesOf, type Entity } from './crate.js';
import { readCrate, refused, type ReadCrate } from './crate-reader.js';
import { ELN_LIMITS } from './limits.js';

/** One record to create, checked and shaped before anything is written. */
interface Planned {
  /** the dataset's @id in the crate */
  source: string;
  body: Rec;
}

interface Plan {
  project?: Planned;
  samples: (Planned & { sourceRecordId?: string })[];
  experiments: (Planned & { mentions: string[] })[];
  /** entities of the graph no record took: counted in the report, kept in the records that reference them */
  unused: number;
}

/** Text cut to what the record's field takes, trimmed first (the notebook trims names, so a cut must not leave only spaces). */
const str = (v: unknown, max: number): string | undefined => (typeof v === 'string' && v.trim() ? v.trim().slice(0, max) : undefined);
const obj = (v: unknown): Rec | undefined => (v && typeof v === 'object' && !Array.isArray(v) ? (v as Rec) : undefined);

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * A value PostgreSQL's jsonb stores: NUL characters dropped and unpaired
 * surrogates replaced (jsonb refuses both), numbers JSON made infinite as null,
 * and what nests deeper than 32 levels kept as JSON text, so an odd crate cannot
 * fail a write half way through the import. Its input is at most 512 levels
 * deep (checked where it was parsed).
 */
function storable(v: unknown, depth = 0): unknown {
  if (typeof v === 'string') return v.replace(/\0/g, '').replace(LONE_SURROGATE, '\ufffd');
  if (v === null || typeof v !== 'object') return typeof v === 'number' && !Number.isFinite(v) ? null : v;
  if (depth > 32) return storable(JSON.stringify(v), depth);
  if (Array.isArray(v)) return v.map((x) => storable(x, depth + 1));
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [storable(k, depth), storable(x, depth + 1)]));
}

/** Keywords as tags: a comma-separated text (eLabFTW) or a list. */
function tagsOf(v: unknown): string[] {
  const list = typeof v === 'string' ? v.split(',') : Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : [];
  const tags = list.map((t) => t.trim().slice(0, 100)).filter(Boolean);
  return [...new Set(tags)].slice(0, 100);
}

/** The JSON of a file of the crate, or undefined when it is absent or not JSON (a foreign crate's file of that name). */
function jsonFile(crate: ReadCrate, path: string): unknown {
  const b = crate.files.get(path);
  if (!b) return undefined;
  try {
    const v: unknown = JSON.parse(b.toString('utf8'));
    return jsonProblem(v)?.kind === 'too_deep' ? undefined : v;
  } catch {
    return undefined;
  }
}

/**
 * The files a dataset holds (nested datasets walked), each checked against the
 * archive: a File the archive holds must have the size and SHA-256 its entity
 * states; one it does not hold (a URL, a file left out) is kept as metadata.
 */
function filesOf(crate: ReadCrate, dataset: Entity, skip: Set<string>, seen = new Set<string>()): Rec[] {
  const out: Rec[] = [];
  for (const id of refIds(dataset.hasPart)) {
    if (seen.has(id)) continue;
    seen.add(id);
    const e = crate.graph.get(id) ?? { '@id': id };
    const types = typesOf(e);
    if (types.includes('Dataset')) {
      out.push(...filesOf(crate, e, skip, seen));
      continue;
    }
    const path = pathOfId(id);
    if (skip.has(path)) continue;
    const bytes = crate.files.get(path);
    const file: Rec = { path, name: str(e.name, 500) ?? path.split('/').pop(), encoding_format: e.encodingFormat ?? e.contentType };
    if (!bytes) {
      out.push({ ...file, in_archive: false, ...(e.contentSize !== undefined ? { size: e.contentSize } : {}), ...(e.sha256 ? { sha256: e.sha256 } : {}) });
      continue;
    }
    const sha256 = createHash('sha256').update(bytes).digest('hex');
    if (typeof e.sha256 === 'string' && e.sha256.toLowerCase() !== sha256) {
      throw refused('eln_file_mismatch', `file ${path}: its SHA-256 is not the one its File entity states`);
    }
    const stated = typeof e.contentSize === 'number' || typeof e.contentSize === 'string' ? String(e.contentSize) : '';
    if (/^\d+$/.test(stated) && Number(stated) !== bytes.length) {
      throw refused('eln_file_mismatch', `file ${path} has ${bytes.length} bytes; its File entity states ${stated}`);
    }
    out.push({
      ...file,
      in_archive: true,
      size: bytes.length,
      sha256,
      ...(bytes.length <= ELN_LIMITS.inlineFileBytes ? { data_base64: bytes.toString('base64') } : {}),
    });
  }
  return out;
}

/**
 * A create body within what one record may hold: past MAX_BODY_CHARS of JSON the
 * files' inline bytes are left out (their names, sizes and hashes stay); a body
 * still larger refuses the crate, before anything is written.
 */
const MAX_BODY_CHARS = 4 * 1024 * 1024;
function bounded(body: Rec, source: string): Rec {
  if (JSON.stringify(body).length <= MAX_BODY_CHARS) return body;
  const slim = JSON.parse(JSON.stringify(body), (k, v: unknown) => (k === 'data_base64' ? undefined : v)) as Rec;
  if (JSON.stringify(slim).length <= MAX_BODY_CHARS) return slim;
  throw new DomainError('too_large', 'eln_too_large', `${source} makes a record of more than ${MAX_BODY_CHARS} characters of JSON`);
}

/** A Person (by reference or inline) as its name and email, for the provenance of a record. */
function personOf(crate: ReadCrate, v: unknown): Rec | undefined {
  const first = Array.isArray(v) ? (v as unknown[])[0] : v;
  const o = obj(first);
  if (!o) return typeof first === 'string' ? { name: first.slice(0, 500) } : undefined;
  const e = typeof o['@id'] === 'string' ? (crate.graph.get(o['@id']) ?? o) : o;
  const name = str(e.name, 500) ?? ([e.givenName, e.familyName].filter((x) => typeof x === 'string').join(' ') || undefined);
  return { name, email: str(e.email, 500), identifier: e.identifier ?? e['@id'] };
}

/** The entities a dataset points to that are neither data nor people (comments, property values, unknown types): kept as they are. */
function linkedEntities(crate: ReadCrate, dataset: Entity): Entity[] {
  const out: Entity[] = [];
  for (const [k, v] of Object.entries(dataset)) {
    if (k === 'hasPart' || k === 'author' || k === 'mentions' || k === 'isPartOf') continue;
    for (const id of refIds(v)) {
      const e = crate.graph.get(id);
      if (e && e !== dataset && !typesOf(e).some((t) => t === 'Dataset' || t === 'File' || t === 'Person')) out.push(e);
    }
  }
  return out;
}

/** What the crate says about a dataset beside the record's own fields: dates, author, origin, files, the rest. */
function provenance(crate: ReadCrate, e: Entity, files: Rec[]): Rec {
  const descriptor = crate.graph.get('ro-crate-metadata.json');
  const publisher = crate.graph.get(refIds(descriptor?.sdPublisher ?? crate.graph.get('./')?.sdPublisher)[0] ?? '');
  const known = new Set(['@id', '@type', 'name', 'text', 'description', 'keywords', 'hasPart', 'author', 'dateCreated', 'dateModified', 'mentions']);
  return {
    source_id: e['@id'],
    identifier: e.identifier,
    date_created: e.dateCreated,
    date_modified: e.dateModified,
    author: personOf(crate, e.author),
    published_by: publisher?.name ?? obj(descriptor?.sdPublisher)?.name,
    archive_root: crate.root,
    files,
    properties: Object.fromEntries(Object.entries(e).filter(([k]) => !known.has(k))),
    entities: linkedEntities(crate, e),
  };
}

/** An experiment's create body: this product's own record when the dataset carries it, else what the dataset says. */
function planExperiment(crate: ReadCrate, e: Entity): Planned & { mentions: string[] } {
  const folder = pathOfId(e['@id']);
  const own = e.additionalType === KIND.experiment ? obj(jsonFile(crate, `${folder}/experiment.json`)) : undefined;
  const skip = new Set<string>();
  const eln: Rec = {};
  const ownContent = obj(own?.content);
  if (own && ownContent) {
    skip.add(`${folder}/experiment.json`).add(`${folder}/versions.json`).add(`${folder}/signatures.json`);
    eln.versions = jsonFile(crate, `${folder}/versions.json`);
    eln.signatures = jsonFile(crate, `${folder}/signatures.json`);
    eln.original = { id: own.id, display_id: own.display_id, version: own.version, signed_at: own.signed_at, signed_by: own.signed_by };
  }
  const files = filesOf(crate, e, skip);
  const meta = { ...provenance(crate, e, files), ...eln };
  const body: Rec =
    own && ownContent
      ? {
          title: str(own.title, 500),
          description: str(own.description, 100_000),
          content: { ...ownContent, eln_import: meta },
          status: str(own.status, 64),
          tags: tagsOf(own.tags),
        }
      : {
          title: str(e.name, 500),
          description: str(e.description, 100_000) ?? str(e.text, 100_000),
          content: { ...(typeof e.text === 'string' ? { text: e.text } : {}), eln_import: meta },
          status: str(e.creativeWorkStatus, 64),
          tags: tagsOf(e.keywords),
        };
  return { source: e['@id'], body: bounded(storable(body) as Rec, e['@id']), mentions: refIds(e.mentions) };
}

function planSample(crate: ReadCrate, e: Entity): Planned & { sourceRecordId?: string } {
  const own = obj(jsonFile(crate, `${pathOfId(e['@id'])}/sample.json`));
  const skip = new Set(own ? [`${pathOfId(e['@id'])}/sample.json`] : []);
  const meta = provenance(crate, e, filesOf(crate, e, skip));
  const body: Rec =
    own && typeof own.name === 'string'
      ? {
          name: str(own.name, 500),
          type: str(own.type, 200),
          status: str(own.status, 64),
          storage_location: str(own.storage_location, 500),
          metadata: { ...(obj(own.metadata) ?? {}), eln_import: meta },
        }
      : { name: str(e.name, 500) ?? str(pathOfId(e['@id']), 500) ?? 'Imported sample', type: str(e.description, 200), metadata: { eln_import: meta } };
  return { source: e['@id'], body: bounded(storable(body) as Rec, e['@id']), sourceRecordId: own && isGuid(own.id) ? own.id.toLowerCase() : undefined };
}

/**
 * What the crate will become, worked out whole before the first write: the root
 * dataset's parts that are datasets become experiments (this product's own
 * Experiment datasets from their experiment.json), samples (additionalType
 * Sample) or the project (additionalType Project). Anything else is kept as
 * metadata of the records that point to it, never a failure.
 */
function plan(crate: ReadCrate): Plan {
  const root = crate.graph.get('./')!;
  const out: Plan = { samples: [], experiments: [], unused: 0 };
  const taken = new Set<string>(['./', 'ro-crate-metadata.json']);
  // some ELNs list every folder and file in the root's hasPart (the specification's example does):
  // a folder inside another dataset is part of that record, not a record of its own
  const nested = new Set<string>();
  for (const e of crate.graph.values()) if (e['@id'] !== './' && typesOf(e).includes('Dataset')) for (const id of refIds(e.hasPart)) nested.add(id);
  for (const id of refIds(root.hasPart)) {
    const e = crate.graph.get(id);
    if (!e || !typesOf(e).includes('Dataset') || taken.has(id) || nested.has(id)) continue;
    taken.add(id);
    if (e.additionalType === KIND.sample) out.samples.push(planSample(crate, e));
    else if (e.additionalType === KIND.project && !out.project) {
      const own = obj(jsonFile(crate, `${pathOfId(id)}/project.json`)) ?? {};
      out.project = {
        source: id,
        body: storable({
          name: str(own.name, 500) ?? str(e.name, 500) ?? 'Imported project',
          description: str(own.description, 100_000) ?? str(e.description, 100_000),
          status: str(own.status, 64),
          tags: tagsOf(own.tags ?? e.keywords),
        }) as Rec,
      };
    } else out.experiments.push(planExperiment(crate, e));
  }
  for (const e of crate.graph.values()) if (!taken.has(e['@id']) && !typesOf(e).includes('Dataset') && !typesOf(e).includes('File')) out.unused++;
  const records = out.samples.length + out.experiments.length + (out.project ? 1 : 0);
  if (records > ELN_LIMITS.records)
    throw new DomainError('too_large', 'eln_too_large', `the crate describes ${records} records; an import creates at most ${ELN_LIMITS.records}`);
  if (records === 0) throw refused('eln_empty', 'the root dataset has no datasets to import (its hasPart names no Dataset entity)');
  return out;
}

/** Every string equal to a key of `ids` replaced by its value (an entry's content naming its samples by id). */
function remap(v: unknown, ids: Map<string, string>): unknown {
  if (typeof v === 'string') return ids.get(v.toLowerCase()) ?? v;
  if (Array.isArray(v)) return v.map((x) => remap(x, ids));
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, remap(x, ids)]));
  return v;
}

const withoutUndefined = (r: Rec): Rec => Object.fromEntries(Object.entries(r).filter(([, v]) => v !== undefined));

/**
 * Imports an .eln archive into the job creator's organisation. The archive is
 * read and checked whole, and every record planned, before the first write; the
 * records are then created through the notebook's record API as the creator (so
 * its permissions, checks, events and audit apply): the project, the samples,
 * then the experiments (their content's sample ids mapped to the new samples).
 * The artifact is a JSON report of what was created.
 */
export async function elnImport(run: JobRun, input: InputOf<'eln_import'>): Promise<Artifact> {
  await run.step(5, 'reading the archive');
  const crate = await readCrate(Buffer.from(input.crate_base64, 'base64'));
  const p = plan(crate);
  await run.step(20, 'creating records');
  const created: Rec = { project: null, samples: [] as Rec[], experiments: [] as Rec[] };
  let projectId: string | undefined;
  if (p.project) {
    const r = await run.sources.create(run.caller, 'projects', withoutUndefined(p.project.body));
    projectId = String(r.id);
    created.project = { source: p.project.source, id: r.id };
  }
  const sampleIds = new Map<string, string>();
  const bySource = new Map<string, string>();
  for (const s of p.samples) {
    run.checkpoint();
    const r = await run.sources.create(run.caller, 'samples', withoutUndefined(s.body));
    if (s.sourceRecordId) sampleIds.set(s.sourceRecordId, String(r.id));
    bySource.set(s.source, String(r.id));
    (created.samples as Rec[]).push({ source: s.source, id: r.id });
  }
  for (const [i, x] of p.experiments.entries()) {
    run.checkpoint();
    const content = remap(x.body.content, sampleIds) as Rec;
    const mentioned = x.mentions.map((m) => bySource.get(m)).filter((id) => id !== undefined);
    if (mentioned.length) content.eln_import = { ...(content.eln_import as Rec), samples: mentioned };
    const r = await run.sources.create(run.caller, 'experiments', withoutUndefined({ ...x.body, content, project_id: projectId }));
    (created.experiments as Rec[]).push({ source: x.source, id: r.id, display_id: r.display_id });
    if (i % 10 === 9) await run.step(20 + Math.round((70 * (i + 1)) / p.experiments.length), `created ${i + 1} of ${p.experiments.length} experiments`);
  }
  await run.step(95, 'writing the report');
  const report = { job_id: run.jobId, archive_root: crate.root, filename: input.filename, created, entities_kept_as_metadata: p.unused };
  const bytes = Buffer.from(JSON.stringify(report, null, 2), 'utf8');
  const { size, sha256 } = await run.files.put(`${run.base}.json`, once(bytes));
  return {
    path: `${run.base}.json`,
    meta: { size, sha256, content_type: 'application/json', rows: p.samples.length + p.experiments.length + (p.project ? 1 : 0) },
  };
}

async function* once(b: Buffer) {
  yield b;
}
