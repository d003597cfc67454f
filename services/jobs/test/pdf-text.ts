import { inflateSync } from 'node:zlib';

/**
 * The text a PDF written by the service shows, one line per text operation:
 * its content streams inflated, and the hex strings of each TJ array (how
 * pdfkit writes text in the standard fonts, split where it kerns) joined.
 * Enough to read back what a report printed; not a general PDF parser.
 */
export function pdfText(bytes: Buffer): string {
  const lines: string[] = [];
  const raw = bytes.toString('latin1');
  for (const m of raw.matchAll(/stream\r?\n([\s\S]*?)\r?\nendstream/g)) {
    let content: string;
    try {
      content = inflateSync(Buffer.from(m[1]!, 'latin1')).toString('latin1');
    } catch {
      continue; // not a deflated stream (an image, a font)
    }
    for (const tj of content.matchAll(/\[([^\]]*)\]\s*TJ/g)) {
      const hex = [...tj[1]!.matchAll(/<([0-9a-fA-F]*)>/g)].map((h) => h[1]).join('');
      lines.push(Buffer.from(hex, 'hex').toString('latin1'));
    }
  }
  return lines.join('\n');
}
