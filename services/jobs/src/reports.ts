import type { CallerContext, FileStore } from '@lab/kit';
import { writePdf, type Artifact, type Pdf } from './artifacts.js';
import type { InputOf, JobType } from './job-types.js';
import type { Rec, Sources } from './sources.js';

/** What a job type's producer gets: its data sources, the creator's context, where to write, how to report progress. */
export interface JobRun {
  jobId: string;
  sources: Sources;
  caller: CallerContext;
  /** where the artifact goes */
  files: FileStore;
  /** local directory under which the run's scratch files go (never shared: a run's files are its own) */
  dir: string;
  /** artifact path without extension: <org>/<job id> */
  base: string;
  step(progress: number, text: string): Promise<void>;
  /** Throws when the run must stop (worker stopping, job lost): cheap enough to call between pages. */
  checkpoint(): void;
  /** An export with more records than this fails instead of being written. */
  maxExportRecords: number;
  /** Every record of a resource in memory (Sources.all), within what this run may still read. */
  all(resource: string, query?: Record<string, string>, parent_id?: string): Promise<Rec[]>;
}

// eslint-disable-next-line @typescript-eslint/no-base-to-string -- objects go to JSON.stringify: String() gets scalars only
const text = (v: unknown): string => (v === null || v === undefined || v === '' ? '-' : typeof v === 'object' ? JSON.stringify(v) : String(v));

function section(doc: Pdf, title: string): void {
  doc.moveDown(0.8).fontSize(13).text(title).moveDown(0.3).fontSize(10);
}

function fields(doc: Pdf, rec: Rec, keys: string[]): void {
  for (const k of keys) doc.text(`${k}: ${text(rec[k])}`);
}

/** One line per record with the chosen columns; "none" when empty. */
function lines(doc: Pdf, recs: Rec[], keys: string[]): void {
  if (!recs.length) {
    doc.text('none');
    return;
  }
  for (const r of recs) doc.text(`• ${keys.map((k) => `${k}: ${text(r[k])}`).join('  |  ')}`);
}

const USAGE = ['started_at', 'ended_at', 'duration_minutes', 'user_id', 'purpose', 'auto_closed'];
const MAINTENANCE = ['maintenance_type', 'scheduled_date', 'completed_date', 'performed_by', 'result', 'severity'];

/**
 * The manifest as a regulated record prints it: per signature who (name and id),
 * when, what it means, and the hash of the content signed, with whether this
 * version still gives that hash.
 */
function signatureManifest(doc: Pdf, signatures: Rec[]): void {
  if (!signatures.length) {
    doc.text('Not signed');
    return;
  }
  for (const s of signatures) {
    doc.text(`${text(s.meaning)}: ${text(s.signer_name)} (${text(s.signer_id)}) at ${text(s.signed_at)}`);
    const matches = s.content_matches === null ? 'not recorded' : s.content_matches ? 'matches this version' : 'DOES NOT match this version';
    doc
      .font('Courier')
      .fontSize(8)
      .text(`  ${text(s.hash_algorithm)} ${text(s.content_hash)} (${matches})`)
      .font('Helvetica')
      .fontSize(10);
  }
}

async function experimentEntry(run: JobRun, input: InputOf<'experiment_entry_pdf'>): Promise<Artifact> {
  await run.step(10, 'loading the entry');
  const e = await run.sources.named(run.caller, 'experiments', input.entry_id, 'entry_id');
  const signatures = await run.sources.signatures(run.caller, input.entry_id);
  await run.step(50, 'rendering the PDF');
  const title = text(e.title ?? e.display_id);
  return writePdf(run.files, `${run.base}.pdf`, title, (doc) => {
    fields(doc, e, ['display_id', 'version', 'status', 'project_id', 'author_id', 'created_at', 'updated_at', 'tags']);
    if (e.amends_id) fields(doc, e, ['amends_id', 'amendment_reason']);
    section(doc, 'Signatures');
    signatureManifest(doc, signatures);
    section(doc, 'Description');
    doc.text(text(e.description));
    section(doc, 'Content');
    doc
      .font('Courier')
      .fontSize(9)
      .text(JSON.stringify(e.content ?? {}, null, 2))
      .font('Helvetica')
      .fontSize(10);
  });
}

async function equipmentRecords(run: JobRun, equipmentId: string, subs: string[]) {
  const equipment = await run.sources.named(run.caller, 'equipment', equipmentId, 'equipment_id');
  const out: Record<string, Rec[]> = {};
  let i = 0;
  for (const sub of subs) {
    await run.step(10 + Math.round((50 * i++) / subs.length), `loading ${sub}`);
    out[sub] = await run.all(`equipment/${sub}`, {}, equipmentId);
  }
  return { equipment, ...out } as { equipment: Rec } & Record<string, Rec[]>;
}

async function equipmentLifecycle(run: JobRun, input: InputOf<'equipment_lifecycle_pdf'>): Promise<Artifact> {
  const d = await equipmentRecords(run, input.equipment_id, ['usage', 'maintenance', 'calibrations', 'qualifications']);
  await run.step(70, 'rendering the PDF');
  const events = [
    ...d.qualifications!.map((q) => ({ at: q.created_at, what: `qualification ${text(q.qualification_type ?? q.type ?? '')}` })),
    ...d.calibrations!.map((c) => ({ at: c.created_at, what: `calibration ${text(c.result ?? '')}` })),
    ...d.maintenance!.map((m) => ({ at: m.log_date ?? m.created_at, what: `maintenance ${text(m.maintenance_type)} (${text(m.result)})` })),
    ...d.usage!.map((u) => ({ at: u.started_at, what: `usage ${text(u.duration_minutes)} min by ${text(u.user_id)}` })),
  ].sort((a, b) => String(a.at).localeCompare(String(b.at)));
  return writePdf(run.files, `${run.base}.pdf`, `Equipment lifecycle: ${text(d.equipment.name)}`, (doc) => {
    fields(doc, d.equipment, [
      'name',
      'status',
      'manufacturer',
      'model',
      'serial_number',
      'location',
      'created_at',
      'last_maintenance_date',
      'next_maintenance_date',
    ]);
    section(doc, `Lifecycle (${events.length} events)`);
    if (!events.length) doc.text('none');
    for (const e of events) doc.text(`${text(e.at)}  ${e.what}`);
  });
}

async function equipmentBook(run: JobRun, input: InputOf<'equipment_book_pdf'>): Promise<Artifact> {
  const d = await equipmentRecords(run, input.equipment_id, ['usage', 'maintenance', 'calibrations']);
  await run.step(70, 'rendering the PDF');
  return writePdf(run.files, `${run.base}.pdf`, `Equipment log book: ${text(d.equipment.name)}`, (doc) => {
    fields(doc, d.equipment, ['name', 'status', 'serial_number', 'location']);
    section(doc, `Usage (${d.usage!.length})`);
    // by when each session started (whole lists are read in creation order, and a session may be recorded late)
    lines(
      doc,
      [...d.usage!].sort((a, b) => String(a.started_at).localeCompare(String(b.started_at))),
      USAGE,
    );
    section(doc, `Maintenance (${d.maintenance!.length})`);
    lines(doc, d.maintenance!, MAINTENANCE);
    section(doc, `Calibrations (${d.calibrations!.length})`);
    for (const c of d.calibrations!) doc.text(`• ${text(c.created_at)}: ${JSON.stringify(c)}`);
    if (!d.calibrations!.length) doc.text('none');
  });
}

async function maintenanceReport(run: JobRun, input: InputOf<'maintenance_report_pdf'>): Promise<Artifact> {
  await run.step(10, 'loading equipment');
  const equipment = input.equipment_id ? [await run.sources.named(run.caller, 'equipment', input.equipment_id, 'equipment_id')] : await run.all('equipment');
  const logs: { equipment: Rec; maintenance: Rec[] }[] = [];
  for (const [i, e] of equipment.entries()) {
    await run.step(10 + Math.round((60 * i) / equipment.length), `loading maintenance of ${text(e.name)}`);
    logs.push({ equipment: e, maintenance: await run.all('equipment/maintenance', {}, String(e.id)) });
  }
  await run.step(75, 'rendering the PDF');
  return writePdf(run.files, `${run.base}.pdf`, 'Maintenance report', (doc) => {
    doc.text(`${equipment.length} equipment, ${logs.reduce((n, l) => n + l.maintenance.length, 0)} maintenance records`);
    for (const l of logs) {
      section(doc, `${text(l.equipment.name)} (next due ${text(l.equipment.next_maintenance_date)})`);
      lines(doc, l.maintenance, MAINTENANCE);
    }
  });
}

/** Reagents with any hazard information. */
export const isHazardous = (r: Rec) =>
  (r.signal_word != null && r.signal_word !== 'none') ||
  (Array.isArray(r.h_phrases) && r.h_phrases.length > 0) ||
  (Array.isArray(r.hazard_pictograms) && r.hazard_pictograms.length > 0);

async function riskAssessment(run: JobRun, input: InputOf<'risk_assessment_pdf'>): Promise<Artifact> {
  await run.step(10, 'loading reagents');
  const reagents = input.reagent_ids
    ? await Promise.all(input.reagent_ids.map((id, i) => run.sources.named(run.caller, 'reagents', id, `reagent_ids.${i}`)))
    : (await run.all('reagents')).filter(isHazardous);
  await run.step(40, 'loading stock');
  const stock = await run.all('stock-items');
  await run.step(70, 'rendering the PDF');
  return writePdf(run.files, `${run.base}.pdf`, 'Risk assessment', (doc) => {
    doc.text(`${reagents.length} reagents with hazard data`);
    for (const r of reagents) {
      section(doc, `${text(r.name)} (CAS ${text(r.cas_number)})`);
      fields(doc, r, ['signal_word', 'h_phrases', 'p_phrases', 'hazard_pictograms', 'storage_class', 'storage_temperature', 'flash_point', 'un_number']);
      const items = stock.filter((s) => s.catalog_id === r.id);
      doc.text(`stock: ${items.map((s) => `${text(s.quantity)} ${text(s.unit)}`).join(', ') || 'none'}`);
    }
  });
}

const ROW_NAMES = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ';

/** A sample's place in the box: metadata.position like "B7" when given, else the next free cell. */
export function layout(samples: Rec[], rows: number, cols: number): { grid: (Rec | undefined)[][]; overflow: Rec[] } {
  const grid: (Rec | undefined)[][] = Array.from({ length: rows }, () => Array.from({ length: cols }, () => undefined));
  const rest: Rec[] = [];
  for (const s of samples) {
    const pos = (s.metadata as Rec | null)?.position;
    const m = typeof pos === 'string' ? /^([A-Z])(\d{1,2})$/i.exec(pos.trim()) : null;
    const r = m ? ROW_NAMES.indexOf(m[1]!.toUpperCase()) : -1;
    const c = m ? Number(m[2]) - 1 : -1;
    if (r >= 0 && r < rows && c >= 0 && c < cols && !grid[r]![c]) grid[r]![c] = s;
    else rest.push(s);
  }
  const overflow: Rec[] = [];
  for (const s of rest) {
    let placed = false;
    for (let r = 0; r < rows && !placed; r++)
      for (let c = 0; c < cols && !placed; c++)
        if (!grid[r]![c]) {
          grid[r]![c] = s;
          placed = true;
        }
    if (!placed) overflow.push(s);
  }
  return { grid, overflow };
}

async function boxLayout(run: JobRun, input: InputOf<'box_layout_pdf'>): Promise<Artifact> {
  await run.step(10, 'loading samples');
  const query: Record<string, string> = {};
  if (input.storage_location) query.storage_location = input.storage_location;
  if (input.storage_location_id) query.storage_location_id = input.storage_location_id;
  const samples = await run.all('samples', query);
  await run.step(60, 'rendering the PDF');
  const { grid, overflow } = layout(samples, input.rows, input.cols);
  const title = input.title ?? `Box layout${input.storage_location ? `: ${input.storage_location}` : ''}`;
  return writePdf(run.files, `${run.base}.pdf`, title, (doc) => {
    doc.text(`${samples.length} samples in a ${input.rows} x ${input.cols} box`);
    const left = 70;
    const top = doc.y + 20;
    const w = Math.min(50, (doc.page.width - left - 50) / input.cols);
    const h = Math.min(40, (doc.page.height - top - 150) / input.rows);
    doc.fontSize(6);
    for (let c = 0; c < input.cols; c++) doc.text(String(c + 1), left + c * w, top - 10, { width: w, align: 'center' });
    for (let r = 0; r < input.rows; r++) {
      doc.text(ROW_NAMES[r]!, left - 15, top + r * h + h / 2 - 3);
      for (let c = 0; c < input.cols; c++) {
        doc.rect(left + c * w, top + r * h, w, h).stroke();
        const s = grid[r]![c];
        if (s) doc.text(text(s.name).slice(0, 24), left + c * w + 2, top + r * h + 2, { width: w - 4, height: h - 4 });
      }
    }
    doc.fontSize(10).text('', left, top + input.rows * h + 20);
    if (overflow.length) doc.text(`Not placed (box full): ${overflow.map((s) => text(s.name)).join(', ')}`, left);
  });
}

export const PDF_PRODUCERS: Partial<Record<JobType, (run: JobRun, input: never) => Promise<Artifact>>> = {
  experiment_entry_pdf: experimentEntry,
  equipment_lifecycle_pdf: equipmentLifecycle,
  equipment_book_pdf: equipmentBook,
  maintenance_report_pdf: maintenanceReport,
  risk_assessment_pdf: riskAssessment,
  box_layout_pdf: boxLayout,
};
