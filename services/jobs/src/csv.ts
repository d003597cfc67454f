/** One CSV field (RFC 4180). */
export const cell = (v: unknown): string => {
  if (v === null || v === undefined) return '';
  // eslint-disable-next-line @typescript-eslint/no-base-to-string -- objects went to JSON.stringify: v is a scalar here
  const s = typeof v === 'object' ? JSON.stringify(v) : String(v);
  // quotes doubled; a leading = + - @ is neutralised so spreadsheets do not run it as a formula
  const safe = typeof v === 'string' && /^[=+\-@]/.test(s) ? `'${s}` : s;
  return /[",\r\n]/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe;
};

/**
 * A row rendered with the first `width` columns, widened to `total` columns.
 * The header is the union of keys in first-seen order, so columns found later
 * only ever append, and a record read before they were found has none of them:
 * its row is its early rendering plus empty cells.
 */
export function widen(row: string, width: number, total: number): string {
  const missing = width === 0 ? Math.max(total - 1, 0) : total - width;
  return row + ','.repeat(missing);
}
