import { sql, type SQL } from 'drizzle-orm';

/**
 * Paging mechanisms of every list that answers over gRPC: the record lists of
 * the records engine (libs/records) and the audit log use them alike.
 */

/** Paging offsets travel as int32 in every contract: a larger one could not be answered. */
export const MAX_LIST_OFFSET = 2_147_483_647;

/**
 * The most bytes of records a list page starts on: the record that crosses it is
 * the page's last. 500 records of up to 1 MB each would be far more than a gRPC
 * answer may carry (64 MiB) or a process should hold for one request.
 */
export const LIST_PAGE_BYTES = 8 * 1024 * 1024;

/**
 * A page cut by bytes as well as rows: of the rows `page` selects (with a text
 * column `json`, in the order `order` names by its output columns), those whose
 * bytes before them are under LIST_PAGE_BYTES, in that order. The first row is
 * always kept, and the row that crosses the bound is the last. `rowsInReach`
 * adds `rows_in_reach`, how many rows `page` had, for a caller that cannot tell
 * a cut page from its own count. The order is the page's own, so the running
 * sum needs no second sort.
 */
export function cutByBytes(page: SQL, order: SQL, opts: { rowsInReach?: boolean } = {}): SQL {
  return sql`select * from (
      select p.*, coalesce(sum(octet_length(p.json)) over (order by ${order} rows between unbounded preceding and 1 preceding), 0) as bytes_before
        ${opts.rowsInReach ? sql`, (count(*) over ())::int as rows_in_reach` : sql``}
      from (${page}) p
    ) sized
    where bytes_before < ${LIST_PAGE_BYTES}
    order by ${order}`;
}

/**
 * A keyset page read one row past `limit` through cutByBytes with rowsInReach:
 * the rows it shows, whether more follow (the extra row came back, or the bytes
 * cut what did), and whether the bytes cut it short of the limit.
 */
export function keysetPage<T extends { rows_in_reach: number }>(fetched: T[], limit: number): { shown: T[]; more: boolean; cut: boolean } {
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-conversion -- a count(*) is a bigint, which the driver gives as text
  const reach = Number(fetched[0]?.rows_in_reach ?? 0);
  const shown = fetched.slice(0, limit);
  return { shown, more: reach > shown.length, cut: shown.length < Math.min(reach, limit) };
}
