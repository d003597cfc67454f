import { bodyText, itemFromJson, jsonBody, listFromJson } from '../src/replies';

describe('answer bodies', () => {
  it('writes a whole text as one string', () => {
    expect(itemFromJson(200, '{"a":1}').body).toBe('{"data":{"a":1}}');
  });

  it('writes a text in pieces as the UTF-8 bytes of the same text, characters outside ASCII included', () => {
    const pieces = ['[{"unit":"°C"', ',"note":"😀 \\u0001"}', ',{"unit":"µS/cm"}]'];
    const body = listFromJson(pieces, { limit: 2, offset: 0, total: 2 }).body;
    expect(Buffer.isBuffer(body)).toBe(true);
    const text = `{"data":${pieces.join('')},"pagination":{"limit":2,"offset":0,"total":2}}`;
    expect(Buffer.compare(body as Buffer, Buffer.from(text))).toBe(0);
    expect(bodyText({ status: 200, body })).toBe(text);
    expect(JSON.parse(text)).toEqual({ data: [{ unit: '°C', note: '😀 \u0001' }, { unit: 'µS/cm' }], pagination: { limit: 2, offset: 0, total: 2 } });
  });

  it('sizes the buffer exactly', () => {
    expect(jsonBody('<', ['ä', 'b', ''], '>')).toEqual(Buffer.from('<äb>'));
    expect(jsonBody('', [], '')).toEqual(Buffer.alloc(0));
  });
});
