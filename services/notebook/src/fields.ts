import { fields } from '@lab/kit';

/** The notebook's record schemas use the shared field vocabulary. */
export const { name, text, status, tags, reference, object, date } = fields;
