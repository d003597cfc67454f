import { z } from 'zod';
import { JOB_TYPES, type JobType } from '@lab/contracts';
import { isGuid, isoTimestamp } from '@lab/kit';
import { CRATE_BASE64_CHARS, ELN_EXPORT_MAX_IDS } from './eln/limits.js';

/** The allowlist of the spec (kept in @lab/contracts, owned here); anything else is 403. */
export { JOB_TYPES, type JobType };

/** Job types that export data of many people: administrators only. */
export const ADMIN_JOB_TYPES = new Set<JobType>(['audit_export', 'biosafety_export', 'gdpr_export', 'org_data_export']);

/** Job types that create records as their creator: they need `write`, and a failed run is not repeated over what it wrote. */
export const WRITING_JOB_TYPES = new Set<JobType>(['eln_import']);

export const isJobType = (v: string): v is JobType => (JOB_TYPES as readonly string[]).includes(v);

// format only documents the check in the OpenAPI document
const uuid = z
  .string()
  .refine(isGuid, 'must be a UUID')
  .meta({ format: 'uuid' })
  .transform((s) => s.toLowerCase());
/**
 * A timestamp PostgreSQL stores: refused up front, a list query is a 400 rather
 * than a 500, and an export is not accepted (202) only to fail on every attempt.
 */
export const isoTime = isoTimestamp();

/**
 * Input of each job type (the spec fixes only experiment_entry_pdf's entry_id).
 * Unknown keys are refused so a typo does not silently produce another report.
 */
export const INPUTS = {
  experiment_entry_pdf: z.strictObject({ entry_id: uuid }),
  equipment_lifecycle_pdf: z.strictObject({ equipment_id: uuid }),
  equipment_book_pdf: z.strictObject({ equipment_id: uuid }),
  maintenance_report_pdf: z.strictObject({ equipment_id: uuid.optional() }),
  risk_assessment_pdf: z.strictObject({ reagent_ids: z.array(uuid).min(1).max(500).optional() }),
  box_layout_pdf: z.strictObject({
    rows: z.number().int().min(1).max(26).default(9),
    cols: z.number().int().min(1).max(26).default(9),
    storage_location: z.string().min(1).max(500).optional(),
    storage_location_id: uuid.optional(),
    title: z.string().min(1).max(200).optional(),
  }),
  audit_export: z.strictObject({ from: isoTime.optional(), to: isoTime.optional() }),
  biosafety_export: z.strictObject({}),
  gdpr_export: z.strictObject({ user_id: uuid }),
  org_data_export: z.strictObject({}),
  // experiments by id, or every experiment of a project: one or the other
  eln_export: z
    .strictObject({
      experiment_ids: z.array(uuid).min(1).max(ELN_EXPORT_MAX_IDS).optional(),
      project_id: uuid.optional(),
    })
    .refine((i) => (i.experiment_ids === undefined) !== (i.project_id === undefined), {
      error: 'give experiment_ids or project_id, not both',
      path: ['experiment_ids'],
    }),
  // the .eln archive itself, base64, inside the JSON body (docs/eln.md: limits)
  eln_import: z.strictObject({
    crate_base64: z
      .string()
      .min(4)
      .max(CRATE_BASE64_CHARS, `the crate is larger than the import takes (${CRATE_BASE64_CHARS} base64 characters)`)
      .regex(/^[A-Za-z0-9+/]+={0,2}$/, 'must be base64'),
    filename: z.string().min(1).max(255).optional(),
  }),
} satisfies Record<JobType, z.ZodType>;

/**
 * What the audit log and the logs keep of a job's input: an import's archive is
 * named by its size and hash, not copied (up to 1 MB of base64 per job).
 */
export function inputForAudit(jobType: JobType, input: Record<string, unknown>): Record<string, unknown> {
  if (jobType !== 'eln_import' || typeof input.crate_base64 !== 'string') return input;
  const { crate_base64, ...rest } = input;
  return { ...rest, crate_base64_chars: crate_base64.length };
}

export type InputOf<T extends JobType> = z.infer<(typeof INPUTS)[T]>;
