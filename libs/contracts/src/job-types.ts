/**
 * The allowlist of background job types, as the specification lists them.
 * The jobs service owns it: it defines each type's input and runs the jobs.
 * It lives here, as a plain list, so that the services that only name job
 * types (webhooks for inbound endpoints, the gateway's OpenAPI document) read
 * the same names without depending on the jobs service.
 */
export const JOB_TYPES = [
  'audit_export',
  'biosafety_export',
  'gdpr_export',
  'org_data_export',
  'equipment_lifecycle_pdf',
  'maintenance_report_pdf',
  'equipment_book_pdf',
  'experiment_entry_pdf',
  'risk_assessment_pdf',
  'box_layout_pdf',
  'eln_export',
  'eln_import',
] as const;

export type JobType = (typeof JOB_TYPES)[number];
