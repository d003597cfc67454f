import { BinaryWriter } from '@bufbuild/protobuf/wire';
import fc from 'fast-check';
import {
  bodyRequestCodec,
  createRecordRequestCodec,
  pointWriteRequestCodec,
  records,
  recordsWire,
  telemetry,
  telemetryWire,
  updateRecordRequestCodec,
  type MessageCodec,
} from '@lab/contracts';

/**
 * The body requests written and read by struct-wire.ts give the generated code's
 * bytes and values, for random messages: nested JSON of every kind (including
 * what JSON cannot hold but a body object can: undefined, NaN, ±Infinity), every
 * field set or unset; and their readers agree with the generated ones on damaged
 * bytes too.
 */

interface Generated<T> {
  encode(message: T, writer?: BinaryWriter): BinaryWriter;
  decode(bytes: Uint8Array): T;
}
interface Method {
  requestSerialize: (value: never) => Buffer;
  requestDeserialize: (bytes: Buffer) => unknown;
}
interface Case {
  name: string;
  codec: MessageCodec<unknown>;
  generated: Generated<unknown>;
  /** the methods sending this message: [generated, through struct-wire] */
  methods: [Method, Method][];
}

const CASES: Case[] = [
  {
    name: 'lab.telemetry.v1.BodyRequest',
    codec: bodyRequestCodec,
    generated: telemetry.BodyRequest,
    methods: (['ingestReadings', 'registerDevice', 'ingestResult', 'connectorHeartbeat'] as const).map((m) => [
      telemetry.TelemetryServiceService[m],
      telemetryWire.service[m],
    ]),
  },
  {
    name: 'lab.telemetry.v1.PointWriteRequest',
    codec: pointWriteRequestCodec,
    generated: telemetry.PointWriteRequest,
    methods: (['createPoint', 'updatePoint', 'deletePoint'] as const).map((m) => [telemetry.TelemetryServiceService[m], telemetryWire.service[m]]),
  },
  {
    name: 'lab.common.v1.CreateRecordRequest',
    codec: createRecordRequestCodec,
    generated: records.CreateRecordRequest,
    methods: [[records.RecordServiceService.createRecord, recordsWire.service.createRecord]],
  },
  {
    name: 'lab.common.v1.UpdateRecordRequest',
    codec: updateRecordRequestCodec,
    generated: records.UpdateRecordRequest,
    methods: [[records.RecordServiceService.updateRecord, recordsWire.service.updateRecord]],
  },
];

const RUNS = 300;

const text = fc.oneof(
  fc.constant(''),
  fc.string({ unit: 'grapheme-ascii' }),
  fc.string({ unit: 'grapheme' }),
  fc.string({ unit: 'binary' }),
  // lone surrogates: encoded as U+FFFD by both
  fc.string({ unit: fc.constantFrom('a', '\ud83d', '\ude00', 'é', '\u0000', '\ufeff') }),
  // past the readers' short-ASCII path
  fc.string({ unit: 'grapheme-ascii', minLength: 33, maxLength: 300 }),
);
const key = fc.oneof({ weight: 6, arbitrary: text }, { weight: 1, arbitrary: fc.constantFrom('__proto__', 'constructor', 'toString', '0', '7', '10', '') });
const number = fc.oneof(
  fc.double(),
  fc.integer(),
  fc.constantFrom(0, -0, 2 ** 53, 2 ** 53 + 2, -(2 ** 63), 1e308, -1e-308, 5e-324, Number.MAX_VALUE, NaN, Infinity, -Infinity),
);

/** An object with these own properties (`__proto__` too, as JSON.parse makes it). */
function objectOf(entries: [string, unknown][]): Record<string, unknown> {
  const o: Record<string, unknown> = {};
  for (const [k, v] of entries) Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
  return o;
}

const { json } = fc.letrec<{ json: unknown; object: Record<string, unknown> }>((tie) => ({
  json: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.constant(null),
    fc.boolean(),
    number,
    text,
    fc.array(fc.oneof({ weight: 9, arbitrary: tie('json') }, { weight: 1, arbitrary: fc.constant(undefined) })),
    tie('object'),
  ),
  object: fc.array(fc.tuple(key, fc.oneof({ weight: 9, arbitrary: tie('json') }, { weight: 1, arbitrary: fc.constant(undefined) }))).map(objectOf),
}));
const body = fc.array(fc.tuple(key, json)).map(objectOf);

/** A random message of the codec's fields, each set or unset. */
function messageOf(codec: MessageCodec<unknown>, generated: Generated<unknown>): fc.Arbitrary<unknown> {
  const empty = generated.decode(new Uint8Array(0)) as Record<string, unknown>;
  const fields: Record<string, fc.Arbitrary<unknown>> = {};
  for (const name of codec.fields) {
    const unset = empty[name];
    fields[name] =
      typeof unset === 'string' ? fc.oneof(fc.constant(''), text) : typeof unset === 'boolean' ? fc.boolean() : fc.option(body, { nil: undefined });
  }
  return fc.record(fields);
}

/** A value with its objects' keys in order, so that equality compares the order too. */
function ordered(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(ordered);
  if (value !== null && typeof value === 'object') {
    return { prototype: Object.getPrototypeOf(value) as unknown, entries: Object.entries(value).map(([k, v]) => [k, ordered(v)]) };
  }
  return value;
}

/** What a decoder makes of bytes: its value, or its error's message. */
function outcome(decode: () => unknown): unknown {
  try {
    return { value: ordered(decode()) };
  } catch (err) {
    return { error: (err as Error).message };
  }
}

const encodeDirect = (codec: MessageCodec<unknown>, message: unknown) => Buffer.from(codec.encode(message, new BinaryWriter()).finish());
const encodeGenerated = (generated: Generated<unknown>, message: unknown) => Buffer.from(generated.encode(message).finish());

describe.each(CASES)('$name through struct-wire', ({ codec, generated, methods }) => {
  test('the codec knows every field of the message, in its order', () => {
    expect(codec.fields).toEqual(Object.keys(generated.decode(new Uint8Array(0)) as object));
  });

  test('random messages: the same bytes, read back as the same values', () => {
    fc.assert(
      fc.property(messageOf(codec, generated), (message) => {
        const bytes = encodeGenerated(generated, message);
        expect(encodeDirect(codec, message)).toEqual(bytes);
        expect(outcome(() => codec.decode(bytes))).toStrictEqual(outcome(() => generated.decode(bytes)));
        for (const [before, after] of methods) {
          expect(after.requestSerialize(message as never)).toEqual(before.requestSerialize(message as never));
          expect(outcome(() => after.requestDeserialize(bytes))).toStrictEqual(outcome(() => before.requestDeserialize(bytes)));
        }
      }),
      { numRuns: RUNS },
    );
  });

  test('damaged bytes: the same values or the same error', () => {
    const damaged = fc.tuple(messageOf(codec, generated), fc.nat(), fc.integer({ min: 0, max: 255 }), fc.nat({ max: 3 })).map(([message, at, byte, cut]) => {
      const bytes = encodeGenerated(generated, message);
      if (bytes.length === 0) return bytes;
      bytes[at % bytes.length] = byte;
      return bytes.subarray(0, bytes.length - (cut === 0 ? at % bytes.length : 0));
    });
    fc.assert(
      fc.property(fc.oneof(damaged, fc.uint8Array()), (bytes) => {
        expect(outcome(() => codec.decode(bytes))).toStrictEqual(outcome(() => generated.decode(bytes)));
      }),
      { numRuns: RUNS * 3 },
    );
  });
});

describe('struct-wire at the edges', () => {
  const direct = createRecordRequestCodec;
  const generated = records.CreateRecordRequest;
  const sameBytes = (message: records.CreateRecordRequest) =>
    expect(encodeDirect(direct as MessageCodec<unknown>, message)).toEqual(encodeGenerated(generated as Generated<unknown>, message));
  const sameValues = (bytes: Uint8Array) => expect(outcome(() => direct.decode(bytes))).toStrictEqual(outcome(() => generated.decode(bytes)));

  test('a JSON.parse body with __proto__, numeric keys, and undefined values', () => {
    const parsed = JSON.parse('{"b":1,"__proto__":{"polluted":true},"2":"two","1":[{"__proto__":null,"x":-0}],"":"empty key"}') as Record<string, unknown>;
    const message = { resource: 'samples', body: { ...objectOf(Object.entries(parsed)), gone: undefined, list: [undefined, 1] }, parent_id: '' };
    sameBytes(message);
    const bytes = encodeGenerated(generated, message);
    sameValues(bytes);
    const read = direct.decode(bytes).body!;
    expect(Object.keys(read)).toEqual(['1', '2', 'b', '', 'list']);
    expect(Object.getPrototypeOf(read)).toBe(Object.prototype);
    expect(Object.is((read['1'] as { x: number }[])[0]!.x, -0)).toBe(true);
  });

  test('bytes that name a key twice, or __proto__ (no encoder here writes them)', () => {
    /** The bytes of `body` with each key of `renamed` renamed (to a name as long). */
    const renaming = (body: Record<string, unknown>, renamed: Record<string, string>) => {
      const bytes = encodeGenerated(generated, { resource: 'samples', body, parent_id: '' });
      let text = bytes.toString('latin1');
      for (const [from, to] of Object.entries(renamed)) text = text.split(from).join(to);
      return Buffer.from(text, 'latin1');
    };
    const twice = renaming({ a: 1, b: [2], c: 3 }, { b: 'a' });
    sameValues(twice);
    expect(Object.entries(direct.decode(twice).body!)).toEqual([
      ['a', [2]],
      ['c', 3],
    ]);
    for (const value of [{ polluted: true }, null, 'text']) {
      const proto = renaming({ x: { '__proto!_': value, kept: 1 } }, { '__proto!_': '__proto__' });
      sameValues(proto);
      const x = direct.decode(proto).body!.x as object;
      expect(Object.getPrototypeOf(x)).toBe(Object.prototype);
      expect(Object.keys(x)).toEqual(['kept']);
    }
  });

  test('the shared writer: right after a request that failed midway, and after a large one', () => {
    const serialize = recordsWire.service.createRecord.requestSerialize;
    const small = { resource: 'samples', body: { name: 'after', nested: { list: [1, 'two'] } }, parent_id: 'p' };
    const large = { resource: 'samples', body: { list: Array.from({ length: 40_000 }, (_, i) => ({ i, text: `item ${i}` })) }, parent_id: '' };
    expect(() => serialize({ resource: 'samples', body: { a: { b: [1, { c: () => 1 }] } }, parent_id: '' })).toThrow('Unsupported any value type: function');
    expect(serialize(small)).toEqual(records.RecordServiceService.createRecord.requestSerialize(small));
    // (Buffer.equals: jest's deep equality takes seconds over a megabyte)
    expect(serialize(large).equals(records.RecordServiceService.createRecord.requestSerialize(large))).toBe(true);
    expect(serialize(small)).toEqual(records.RecordServiceService.createRecord.requestSerialize(small));
  });

  test('more keys than the kept keys have slots, read twice: each its own', () => {
    const keys = Array.from({ length: 10_000 }, (_, i) => (i % 3 === 0 ? `k${i}` : i % 3 === 1 ? `key-${i}`.padEnd(32, '.') : `ключ${i}`));
    const bytes = encodeGenerated(generated, { resource: 'samples', body: { list: keys.map((k, i) => ({ [k]: i })) }, parent_id: '' });
    for (let round = 0; round < 2; round++) sameValues(bytes);
  });

  test("nesting around the decoders' limit: read alike, or refused alike", () => {
    for (let depth = 25; depth <= 55; depth++) {
      let object: unknown = { leaf: true };
      let list: unknown = [true];
      for (let i = 0; i < depth; i++) {
        object = { a: object };
        list = [list];
      }
      for (const body of [{ object }, { list }]) {
        const message = { resource: 'samples', body, parent_id: '' };
        sameBytes(message);
        sameValues(encodeGenerated(generated, message));
      }
    }
  });

  test('a value JSON has no word for fails as the generated code fails', () => {
    for (const value of [() => 1, 1n, Symbol('s')]) {
      const message = { resource: 'samples', body: { value }, parent_id: '' };
      expect(() => encodeDirect(direct as MessageCodec<unknown>, message)).toThrow(
        (() => {
          try {
            encodeGenerated(generated, message);
          } catch (err) {
            return (err as Error).message;
          }
          throw new Error('the generated code took it');
        })(),
      );
    }
  });
});
