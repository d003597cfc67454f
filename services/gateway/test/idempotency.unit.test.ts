import { canonicalJson, parseIdempotencyKey, requestHash } from '../src/idempotency';

describe('canonicalJson', () => {
  it('sorts keys at every level and drops undefined members', () => {
    expect(canonicalJson({ b: 1, a: { d: [1, { z: 1, y: 2 }], c: null }, u: undefined })).toBe('{"a":{"c":null,"d":[1,{"y":2,"z":1}]},"b":1}');
  });

  it('keeps array order and writes undefined items as null', () => {
    expect(canonicalJson([3, undefined, 1])).toBe('[3,null,1]');
  });

  it('renders scalars as JSON', () => {
    expect(canonicalJson('x"y')).toBe('"x\\"y"');
    expect(canonicalJson(undefined)).toBe('null');
    expect(canonicalJson(1.5)).toBe('1.5');
  });
});

describe('requestHash', () => {
  it('ignores key order', () => {
    expect(requestHash('POST', '/v1/samples', { name: 'a', type: 'b' })).toBe(requestHash('post', '/v1/samples', { type: 'b', name: 'a' }));
  });

  it('differs by method, path and body', () => {
    const base = requestHash('POST', '/v1/samples', { name: 'a' });
    expect(requestHash('PUT', '/v1/samples', { name: 'a' })).not.toBe(base);
    expect(requestHash('POST', '/v1/projects', { name: 'a' })).not.toBe(base);
    expect(requestHash('POST', '/v1/samples', { name: 'b' })).not.toBe(base);
    expect(requestHash('POST', '/v1/samples', { name: 'a', x: null })).not.toBe(base);
  });

  it('is a SHA-256 hex digest', () => {
    expect(requestHash('DELETE', '/v1/samples/1', undefined)).toMatch(/^[0-9a-f]{64}$/);
  });
});

describe('parseIdempotencyKey', () => {
  it('accepts 8 to 200 visible characters and no header', () => {
    expect(parseIdempotencyKey(undefined)).toBeUndefined();
    expect(parseIdempotencyKey('12345678')).toBe('12345678');
    expect(parseIdempotencyKey('k'.repeat(200))).toHaveLength(200);
  });

  it.each([['1234567'], ['k'.repeat(201)], ['has space in it'], ['']])('refuses %j with validation_failed', (key) => {
    expect(() => parseIdempotencyKey(key)).toThrow(expect.objectContaining({ code: 'validation_failed', kind: 'invalid' }));
  });
});
