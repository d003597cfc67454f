import { adminPageQuery, type AdminPage } from '@lab/http-api';
import type { Ctx } from '../request.js';
import { parseWith } from '../validation.js';

/** The page a management list asks for (adminPageQuery: limit 1 to 200, default 50; offset from 0). */
export const adminPage = (ctx: Ctx): AdminPage => parseWith(adminPageQuery, ctx.req.query, 'invalid query');

/** The list envelope of a page a service answered (its total included). */
export const listEnvelope = <T>(data: T[], page: { limit: number; offset: number; total: number } | undefined, asked: AdminPage) => ({
  data,
  pagination: { limit: page?.limit ?? asked.limit, offset: page?.offset ?? asked.offset, total: page?.total ?? data.length },
});
