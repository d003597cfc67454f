import { fields } from '@lab/records';

/** The equipment record schemas use the shared field vocabulary. */
export const { name, text, status, tags, reference, object, date, timestamp } = fields;
export const shortText = fields.short;

/** Page bounds of the sub-resource lists (spec: default 100, max 500). */
export const SUB_LIST_LIMITS = { default: 100, max: 500 };
