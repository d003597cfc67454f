import { z } from 'zod';
import { fields } from '@lab/records';

/** The inventory's record schemas use the shared field vocabulary, plus its own pieces. */
export const { name, short, text, reference, date } = fields;
export const phrases = z.array(z.string().trim().min(1).max(200)).max(200);

/**
 * Amounts are bounded so that they stay exact as JSON numbers and meaningful as
 * stock (1e12 of any unit is beyond any laboratory).
 */
const MAX_AMOUNT = 1e12;
export const number = z.number('must be a number').min(-MAX_AMOUNT).max(MAX_AMOUNT);
export const amount = z.number('must be a number').min(0, 'must not be negative').max(MAX_AMOUNT);
