import { tableFiles, writeZip, type Artifact, type ZipEntry } from './artifacts.js';
import type { InputOf, JobType } from './job-types.js';
import { isHazardous, type JobRun } from './reports.js';
import type { Rec } from './sources.js';

type Tables = Record<string, Rec[]>;

/** The ZIP of an export: <table>.json and <table>.csv per table, and manifest.json. */
async function zipTables(run: JobRun, jobType: JobType, tables: Tables): Promise<Artifact> {
  await run.step(85, 'writing the archive');
  const entries: ZipEntry[] = Object.entries(tables).flatMap(([name, recs]) => tableFiles(name, recs));
  const counts = Object.fromEntries(Object.entries(tables).map(([n, r]) => [n, r.length]));
  entries.unshift({
    name: 'manifest.json',
    content: JSON.stringify({ job_id: run.jobId, job_type: jobType, org_id: run.caller.org_id, generated_at: new Date().toISOString(), tables: counts }, null, 2),
  });
  const rows = Object.values(counts).reduce((a, b) => a + b, 0);
  return writeZip(run.dir, `${run.base}.zip`, entries, rows);
}

/** Loads named tables one after another, reporting progress between them. */
async function load(run: JobRun, loaders: [string, () => Promise<Rec[]>][], from = 5, to = 80): Promise<Tables> {
  const out: Tables = {};
  for (const [i, [name, fn]] of loaders.entries()) {
    await run.step(from + Math.round(((to - from) * i) / loaders.length), `loading ${name}`);
    out[name] = await fn();
  }
  return out;
}

/** Every record of a sub-resource across all the organisation's equipment. */
async function perEquipment(run: JobRun, equipment: Rec[], sub: string): Promise<Rec[]> {
  const out: Rec[] = [];
  for (const e of equipment) out.push(...(await run.sources.all(run.caller, `equipment/${sub}`, {}, String(e.id))));
  return out;
}

async function auditExport(run: JobRun, input: InputOf<'audit_export'>): Promise<Artifact> {
  const t = await load(run, [['audit', () => run.sources.auditLog(run.caller, input)]]);
  return zipTables(run, 'audit_export', t);
}

/** Hazardous reagents, their stock and its movements, and the samples held. */
async function biosafetyExport(run: JobRun): Promise<Artifact> {
  const s = run.sources;
  const t = await load(run, [
    ['reagents', async () => (await s.all(run.caller, 'reagents')).filter(isHazardous)],
    ['stock_items', () => s.all(run.caller, 'stock-items')],
    ['stock_movements', () => s.all(run.caller, 'stock-movements')],
    ['samples', () => s.all(run.caller, 'samples')],
  ]);
  const hazardous = new Set(t.reagents!.map((r) => r.id));
  t.stock_items = t.stock_items!.filter((i) => hazardous.has(i.catalog_id));
  const items = new Set(t.stock_items.map((i) => i.id));
  t.stock_movements = t.stock_movements!.filter((m) => items.has(m.stock_item_id));
  return zipTables(run, 'biosafety_export', t);
}

/** Fields that tie a record to a person. */
const PERSON_FIELDS = ['author_id', 'created_by', 'owner_id', 'lead_researcher_id', 'user_id', 'performed_by', 'closed_by', 'signed_by', 'actor_user_id'];
const about = (userId: string) => (r: Rec) => PERSON_FIELDS.some((f) => r[f] === userId) || r.record_id === userId;

/** Everything the organisation holds about one person (right of access). */
async function gdprExport(run: JobRun, input: InputOf<'gdpr_export'>): Promise<Artifact> {
  const s = run.sources;
  const mine = about(input.user_id);
  const c = run.caller;
  const t = await load(run, [
    ['member', async () => {
      const m = await s.member(c, input.user_id);
      return m ? [m] : [];
    }],
    ['experiments', async () => (await s.all(c, 'experiments')).filter(mine)],
    ['projects', async () => (await s.all(c, 'projects')).filter(mine)],
    ['samples', async () => (await s.all(c, 'samples')).filter(mine)],
    ['stock_movements', async () => (await s.all(c, 'stock-movements')).filter(mine)],
    ['equipment_usage', async () => (await perEquipment(run, await s.all(c, 'equipment'), 'usage')).filter(mine)],
    ['audit', async () => (await s.auditLog(c)).filter(mine)],
  ]);
  return zipTables(run, 'gdpr_export', t);
}

/** Every record of the organisation, table by table. */
async function orgDataExport(run: JobRun): Promise<Artifact> {
  const s = run.sources;
  const c = run.caller;
  let equipment: Rec[] = [];
  const t = await load(run, [
    ['experiments', () => s.all(c, 'experiments')],
    ['projects', () => s.all(c, 'projects')],
    ['samples', () => s.all(c, 'samples')],
    ['reagents', () => s.all(c, 'reagents')],
    ['stock_items', () => s.all(c, 'stock-items')],
    ['stock_movements', () => s.all(c, 'stock-movements')],
    ['inventories', () => s.all(c, 'inventories')],
    ['equipment', async () => (equipment = await s.all(c, 'equipment'))],
    ['equipment_usage', () => perEquipment(run, equipment, 'usage')],
    ['equipment_maintenance', () => perEquipment(run, equipment, 'maintenance')],
    ['equipment_calibrations', () => perEquipment(run, equipment, 'calibrations')],
    ['equipment_qualifications', () => perEquipment(run, equipment, 'qualifications')],
    ['audit', () => s.auditLog(c)],
  ]);
  return zipTables(run, 'org_data_export', t);
}

export const EXPORT_PRODUCERS: Partial<Record<JobType, (run: JobRun, input: never) => Promise<Artifact>>> = {
  audit_export: auditExport,
  biosafety_export: biosafetyExport,
  gdpr_export: gdprExport,
  org_data_export: orgDataExport,
};
