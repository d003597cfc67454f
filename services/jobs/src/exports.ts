import type { Artifact } from './artifacts.js';
import { exportTables, type Pages } from './export-archive.js';
import type { InputOf, JobType } from './job-types.js';
import { isHazardous, type JobRun } from './reports.js';
import type { Rec } from './sources.js';

/** The records of each page that pass `keep` (a page left empty is still yielded: the reader checks for a stop per page). */
async function* only(pages: Pages, keep: (r: Rec) => boolean): Pages {
  for await (const page of pages) yield page.filter(keep);
}

/** The pages unchanged, with the ids of their records added to `ids` (a later table filters on them). */
async function* idsInto(ids: Set<unknown>, pages: Pages): Pages {
  for await (const page of pages) {
    for (const r of page) ids.add(r.id);
    yield page;
  }
}

/** The ids of the records (the equipment whose sub-records a table reads). */
async function idsOf(pages: Pages): Promise<Set<unknown>> {
  const ids = new Set<unknown>();
  for await (const page of pages) for (const r of page) ids.add(r.id);
  return ids;
}

/** Every record of a sub-resource across the given equipment. */
async function* perEquipment(run: JobRun, equipmentIds: Iterable<unknown>, sub: string): Pages {
  for (const id of equipmentIds) yield* run.sources.pages(run.caller, `equipment/${sub}`, {}, String(id));
}

async function auditExport(run: JobRun, input: InputOf<'audit_export'>): Promise<Artifact> {
  return exportTables(run, 'audit_export', [['audit', () => run.sources.auditPages(run.caller, input)]]);
}

/** Hazardous reagents, their stock and its movements, and the samples held. */
async function biosafetyExport(run: JobRun): Promise<Artifact> {
  const s = run.sources;
  const c = run.caller;
  // ids only: the tables themselves stream to disk
  const hazardous = new Set<unknown>();
  const items = new Set<unknown>();
  return exportTables(run, 'biosafety_export', [
    ['reagents', () => idsInto(hazardous, only(s.pages(c, 'reagents'), isHazardous))],
    [
      'stock_items',
      () =>
        idsInto(
          items,
          only(s.pages(c, 'stock-items'), (i) => hazardous.has(i.catalog_id)),
        ),
    ],
    ['stock_movements', () => only(s.pages(c, 'stock-movements'), (m) => items.has(m.stock_item_id))],
    ['samples', () => s.pages(c, 'samples')],
  ]);
}

/** Fields that tie a record to a person. */
const PERSON_FIELDS = ['author_id', 'created_by', 'owner_id', 'lead_researcher_id', 'user_id', 'performed_by', 'closed_by', 'signed_by', 'actor_user_id'];
const about = (userId: string) => (r: Rec) => PERSON_FIELDS.some((f) => r[f] === userId) || r.record_id === userId;

/** Everything the organisation holds about one person (right of access). */
async function gdprExport(run: JobRun, input: InputOf<'gdpr_export'>): Promise<Artifact> {
  const s = run.sources;
  const mine = about(input.user_id);
  const c = run.caller;
  return exportTables(run, 'gdpr_export', [
    [
      'member',
      async function* () {
        const m = await s.member(c, input.user_id);
        if (m) yield [m];
      },
    ],
    ['experiments', () => only(s.pages(c, 'experiments'), mine)],
    ['projects', () => only(s.pages(c, 'projects'), mine)],
    ['samples', () => only(s.pages(c, 'samples'), mine)],
    ['stock_movements', () => only(s.pages(c, 'stock-movements'), mine)],
    [
      'equipment_usage',
      async function* () {
        yield* only(perEquipment(run, await idsOf(s.pages(c, 'equipment')), 'usage'), mine);
      },
    ],
    ['audit', () => only(s.auditPages(c), mine)],
  ]);
}

/** Every record of the organisation, table by table. */
async function orgDataExport(run: JobRun): Promise<Artifact> {
  const s = run.sources;
  const c = run.caller;
  const equipment = new Set<unknown>();
  return exportTables(run, 'org_data_export', [
    ['experiments', () => s.pages(c, 'experiments')],
    ['projects', () => s.pages(c, 'projects')],
    ['samples', () => s.pages(c, 'samples')],
    ['reagents', () => s.pages(c, 'reagents')],
    ['stock_items', () => s.pages(c, 'stock-items')],
    ['stock_movements', () => s.pages(c, 'stock-movements')],
    ['inventories', () => s.pages(c, 'inventories')],
    ['equipment', () => idsInto(equipment, s.pages(c, 'equipment'))],
    ['equipment_usage', () => perEquipment(run, equipment, 'usage')],
    ['equipment_maintenance', () => perEquipment(run, equipment, 'maintenance')],
    ['equipment_calibrations', () => perEquipment(run, equipment, 'calibrations')],
    ['equipment_qualifications', () => perEquipment(run, equipment, 'qualifications')],
    ['audit', () => s.auditPages(c)],
  ]);
}

export const EXPORT_PRODUCERS: Partial<Record<JobType, (run: JobRun, input: never) => Promise<Artifact>>> = {
  audit_export: auditExport,
  biosafety_export: biosafetyExport,
  gdpr_export: gdprExport,
  org_data_export: orgDataExport,
};
