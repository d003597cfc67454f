import { z } from 'zod';
import type { Ctx } from '../request.js';
import { parseWith } from '../validation.js';

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

export const adminPage = (ctx: Ctx): AdminPage => parseWith(adminPageQuery, ctx.req.query, 'invalid query');

/** The list envelope of a page a service answered (its total included). */
export const listEnvelope = <T>(data: T[], page: { limit: number; offset: number; total: number } | undefined, asked: AdminPage) => ({
  data,
  pagination: { limit: page?.limit ?? asked.limit, offset: page?.offset ?? asked.offset, total: page?.total ?? data.length },
});
