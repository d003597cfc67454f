import { z } from 'zod';

/**
 * The page of every management list (MANAGEMENT_API.md, "Reading and undoing
 * what was made"): limit 1 to 200, default 50; offset from 0. Unknown query
 * parameters are refused, so a typo is a 400 rather than a filter silently ignored.
 */
const ADMIN_PAGE_MAX = 200;
export const adminPageFields = {
  limit: z.coerce.number().int().min(1).max(ADMIN_PAGE_MAX).default(50),
  offset: z.coerce.number().int().min(0).max(1_000_000_000).default(0),
};
export const adminPageQuery = z.object(adminPageFields).strict();

export type AdminPage = z.infer<typeof adminPageQuery>;
