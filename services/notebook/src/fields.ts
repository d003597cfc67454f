import { fields } from '@lab/records';

/** The notebook's record schemas use the shared field vocabulary. */
export const { name, text, status, tags, reference, object, date } = fields;
