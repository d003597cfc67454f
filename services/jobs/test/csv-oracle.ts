import { cell } from '../src/csv';

/**
 * An export table's CSV as the format defines it, built from the whole table in
 * memory: RFC 4180, the union of the records' keys in first-seen order as header,
 * CRLF. The streaming TableFile must give exactly these bytes.
 */
export function toCsv(records: Record<string, unknown>[]): string {
  const keys: string[] = [];
  for (const r of records) for (const k of Object.keys(r)) if (!keys.includes(k)) keys.push(k);
  const lines = [keys.map(cell).join(',')];
  for (const r of records) lines.push(keys.map((k) => cell(r[k])).join(','));
  return `${lines.join('\r\n')}\r\n`;
}
