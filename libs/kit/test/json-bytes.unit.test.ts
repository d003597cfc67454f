import { isUtf8 } from 'node:buffer';
import fc from 'fast-check';
import { DomainError, jsonFromBytes } from '../src';

/** The refusal of bytes that are not UTF-8: its code and the offset it names. */
function refusal(bytes: Uint8Array): { code: string; offset: unknown } | undefined {
  try {
    jsonFromBytes(bytes);
    return undefined;
  } catch (err) {
    if (!(err instanceof DomainError)) throw err;
    return { code: err.code, offset: err.details?.offset };
  }
}

const lenient = new TextDecoder('utf-8', { ignoreBOM: true });
const REPLACEMENT = '\uFFFD';

describe('JSON bytes', () => {
  it('reads UTF-8 as it is, and one leading byte order mark as nothing', () => {
    expect(jsonFromBytes(Buffer.from('{"name":"Müller 🧪"}'))).toEqual({ name: 'Müller 🧪' });
    expect(jsonFromBytes(Buffer.from('\uFEFF{"a":1}'))).toEqual({ a: 1 });
    // a second one is content, and not JSON's whitespace
    expect(refusal(Buffer.from('\uFEFF\uFEFF{"a":1}'))).toEqual({ code: 'invalid_json', offset: undefined });
    // inside a string it is a character like any other
    expect(jsonFromBytes(Buffer.from('{"a":"\uFEFF"}'))).toEqual({ a: '\uFEFF' });
  });

  it('names the byte where the first ill-formed sequence begins', () => {
    const at = (hex: string) => refusal(Buffer.from(hex.replace(/ /g, ''), 'hex'))?.offset;
    expect(at('22 4d fc 6c 22')).toBe(2); // Latin-1 ü
    expect(at('22 ff fe c0 af c3 22')).toBe(1);
    expect(at('22 c0 af 22')).toBe(1); // overlong "/"
    expect(at('22 e0 9f bf 22')).toBe(1); // overlong below U+0800
    expect(at('22 ed a0 80 22')).toBe(1); // a surrogate
    expect(at('22 f4 90 80 80 22')).toBe(1); // past U+10FFFF
    expect(at('22 e2 82 22')).toBe(1); // cut short by the quote
    expect(at('22 41 e2 82')).toBe(2); // cut short by the end
    expect(at('22 80 22')).toBe(1); // a continuation byte alone
    expect(at('ff fe 7b 00')).toBe(0); // a UTF-16 byte order mark
  });

  it('agrees with a decoder that replaces: what comes before the offset is whole, the offset begins a replacement', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 24 }), fc.uint8Array({ maxLength: 24 }), (head, tail) => {
        // valid text around random bytes, which are invalid more often than not
        const bytes = Buffer.concat([Buffer.from('"é'), head, Buffer.from('😀'), tail]);
        const offset = refusal(bytes)?.offset;
        if (isUtf8(bytes)) {
          expect(offset).not.toEqual(expect.any(Number));
          return;
        }
        expect(offset).toEqual(expect.any(Number));
        const at = offset as number;
        expect(isUtf8(bytes.subarray(0, at))).toBe(true);
        expect(lenient.decode(bytes.subarray(at)).startsWith(REPLACEMENT)).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });

  it('refuses text that is UTF-8 but not JSON as invalid_json naming no offset', () => {
    expect(refusal(Buffer.from('{"a":'))).toEqual({ code: 'invalid_json', offset: undefined });
    expect(refusal(Buffer.alloc(0))).toEqual({ code: 'invalid_json', offset: undefined });
  });
});
