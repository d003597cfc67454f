import { isUtf8 } from 'node:buffer';
import { DomainError } from './errors.js';

/**
 * JSON text as a request carries it: bytes that must be UTF-8 (RFC 8259, 8.1).
 * The one place a JSON body's bytes become a value, for every route that takes
 * JSON: the gateway's body parser and the inbound webhook receiver (after its
 * signature is checked over the same bytes).
 *
 * A body that is not UTF-8 is refused, 400 invalid_json naming the offset of its
 * first byte that is not, never decoded with replacement characters: a client
 * that sent Latin-1 must learn of it, not find "M\uFFFDller" in its notebook. A
 * charset parameter changes nothing (RFC 8259, 11: none is defined for JSON).
 * One leading UTF-8 byte order mark is ignored, as RFC 8259 allows a parser to:
 * Windows tools add one, and it carries no content.
 */
export function jsonFromBytes(bytes: Uint8Array): unknown {
  // isUtf8 is simdutf's validation, a small fraction of what JSON.parse costs
  if (!isUtf8(bytes)) throw notUtf8(firstInvalidUtf8(bytes), bytes);
  const start = hasBom(bytes) ? BOM.length : 0;
  const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8', start);
  try {
    return JSON.parse(text);
  } catch {
    throw DomainError.invalid('request body is not valid JSON', undefined, 'invalid_json');
  }
}

const BOM = [0xef, 0xbb, 0xbf];
const hasBom = (b: Uint8Array) => b[0] === BOM[0] && b[1] === BOM[1] && b[2] === BOM[2];

function notUtf8(offset: number, bytes: Uint8Array): DomainError {
  const hex = bytes[offset]!.toString(16).padStart(2, '0');
  return DomainError.invalid(
    `request body is not UTF-8: the byte at offset ${offset} (0x${hex}) does not begin a UTF-8 character; JSON must be sent as UTF-8`,
    { offset },
    'invalid_json',
  );
}

/**
 * Where the first ill-formed sequence of `bytes` begins (-1 if none): the byte
 * at which a decoder would put its first U+FFFD, by the well-formed sequences of
 * Unicode's table 3-7 (no overlong forms, no surrogates, nothing past U+10FFFF).
 * Run only on a body already found invalid, so it is written to be plain.
 */
function firstInvalidUtf8(bytes: Uint8Array): number {
  for (let i = 0; i < bytes.length;) {
    const lead = bytes[i]!;
    if (lead < 0x80) {
      i++;
      continue;
    }
    let trailing: number;
    // the range of the second byte; the later ones are always 0x80..0xBF
    let low = 0x80;
    let high = 0xbf;
    if (lead >= 0xc2 && lead <= 0xdf) trailing = 1;
    else if (lead >= 0xe0 && lead <= 0xef) {
      trailing = 2;
      if (lead === 0xe0) low = 0xa0; // overlong below U+0800
      if (lead === 0xed) high = 0x9f; // the surrogates U+D800..U+DFFF
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      trailing = 3;
      if (lead === 0xf0) low = 0x90; // overlong below U+10000
      if (lead === 0xf4) high = 0x8f; // past U+10FFFF
    } else return i; // a continuation byte with no lead, C0/C1 (overlong) or F5..FF
    if (i + trailing >= bytes.length) return i; // cut short by the end
    const second = bytes[i + 1]!;
    if (second < low || second > high) return i;
    for (let k = 2; k <= trailing; k++) {
      const b = bytes[i + k]!;
      if (b < 0x80 || b > 0xbf) return i;
    }
    i += trailing + 1;
  }
  return -1;
}
