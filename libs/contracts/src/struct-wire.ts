import { WireType, type BinaryReader, type BinaryWriter } from '@bufbuild/protobuf/wire';

/**
 * A plain JSON value written as google.protobuf.Struct bytes and read back,
 * without the generated code's message objects (hot path: the bodies of ingest
 * batches and record writes, gateway to service).
 *
 * The generated code (google/protobuf/struct.ts) wraps every JSON value in a
 * `Value` object (`Struct.wrap`, `Value.wrap`) before encoding it, and builds
 * `Struct`, `Struct_FieldsEntry` and `Value` objects while decoding before
 * unwrapping them: for an ingest batch of 500 readings that was most of the
 * gRPC cost on both sides (docs/benchmarks.md, "Struct bodies on the wire").
 * This module writes and reads the same bytes and values directly, as the
 * generated code does in every case (struct-wire.unit.test.ts holds it to them):
 *
 * - keys in `Object.keys` order; a key whose value is `undefined` is left out;
 *   an empty key is an entry without its key field;
 * - a key `__proto__` (an own property, as JSON.parse makes it) is left out on
 *   both sides: the generated code copies keys into a plain object, where that
 *   assignment sets the prototype instead of adding a key;
 * - numbers of any kind (NaN, ±Infinity, -0) as the double they are;
 * - `undefined` in an array is an empty Value (it reads back as `undefined`);
 * - a value of another type (function, bigint, symbol) throws as Value.wrap does;
 * - reading: unknown fields skipped, the last of a repeated key or oneof case
 *   wins, and nesting deeper than the generated decoder's limit (100 messages)
 *   throws its error.
 */

/** Struct.fields entry (1), its key (1) and value (2); Value's cases; ListValue.values (1). */
const ENTRY = 10;
const ENTRY_KEY = 10;
const ENTRY_VALUE = 18;
const NULL_VALUE = 8;
const NUMBER_VALUE = 17;
const STRING_VALUE = 26;
const BOOL_VALUE = 32;
const STRUCT_VALUE = 42;
const LIST_VALUE = 50;
const LIST_ITEM = 10;

/** The generated decoders' limit of nested messages, and their error past it. */
const MAX_DEPTH = 100;
const tooDeep = () => new Error('protobuf decode recursion limit exceeded');

type JsonObject = Record<string, unknown>;

/**
 * Skips a field the reader does not know (or of another wire type than its
 * own), as the generated decoders do; false where they stop reading the
 * message instead: at an end-group tag or a tag 0.
 */
export function skipField(reader: BinaryReader, tag: number): boolean {
  // eslint-disable-next-line @typescript-eslint/no-unsafe-enum-assignment -- a tag's low 3 bits are its wire type (6 and 7 make reader.skip throw, as they do the generated decoders)
  const wireType = (tag & 7) as WireType;
  if (wireType === WireType.EndGroup || tag === 0) return false;
  reader.skip(wireType);
  return true;
}

/**
 * Writes the fields of the Struct that `object` stands for (the message's
 * content: the caller writes its tag and length, e.g. with fork/join).
 */
export function writeStruct(writer: BinaryWriter, object: object): void {
  for (const key of Object.keys(object)) {
    const value = (object as JsonObject)[key];
    if (value === undefined || key === '__proto__') continue;
    writer.uint32(ENTRY).fork();
    if (key !== '') writer.uint32(ENTRY_KEY).string(key);
    writeValueMessage(writer.uint32(ENTRY_VALUE), value);
    writer.join();
  }
}

/**
 * Writes the Value that `value` stands for as a length-delimited field's
 * payload. A number, boolean or null makes a Value of known length, written
 * without a fork and join (most of a batch's values).
 */
function writeValueMessage(writer: BinaryWriter, value: unknown): void {
  if (typeof value === 'number') writer.uint32(9).uint32(NUMBER_VALUE).double(value);
  else if (typeof value === 'boolean') writer.uint32(2).uint32(BOOL_VALUE).bool(value);
  else if (value === null) writer.uint32(2).uint32(NULL_VALUE).int32(0);
  else {
    writer.fork();
    writeValue(writer, value);
    writer.join();
  }
}

/** Writes the fields of the Value that `value` stands for (nothing for undefined). */
function writeValue(writer: BinaryWriter, value: unknown): void {
  if (value === null) writer.uint32(NULL_VALUE).int32(0);
  else if (typeof value === 'boolean') writer.uint32(BOOL_VALUE).bool(value);
  else if (typeof value === 'number') writer.uint32(NUMBER_VALUE).double(value);
  else if (typeof value === 'string') writer.uint32(STRING_VALUE).string(value);
  else if (Array.isArray(value)) {
    writer.uint32(LIST_VALUE).fork();
    for (const item of value as unknown[]) writeValueMessage(writer.uint32(LIST_ITEM), item);
    writer.join();
  } else if (typeof value === 'object') {
    writer.uint32(STRUCT_VALUE).fork();
    writeStruct(writer, value);
    writer.join();
  } else if (value !== undefined) throw new Error(`Unsupported any value type: ${typeof value}`);
}

/** A reader and the bytes it reads (`new BinaryReader(bytes)`: its positions index them). */
export interface StructSource {
  reader: BinaryReader;
  bytes: Uint8Array;
}

/**
 * Reads a Struct of `length` bytes as a plain object. `depth`: the messages it
 * is nested in (1 for a Struct field of a request), for the nesting limit.
 */
export function readStruct(source: StructSource, length: number, depth: number): JsonObject {
  if (depth >= MAX_DEPTH) throw tooDeep();
  const { reader } = source;
  const end = reader.pos + length;
  const object: JsonObject = {};
  while (reader.pos < end) {
    const tag = reader.uint32();
    if (tag === ENTRY) {
      readEntry(source, reader.uint32(), depth + 1, object);
      continue;
    }
    if (!skipField(reader, tag)) break;
  }
  return object;
}

/**
 * Keys read before, by a hash of their bytes. A batch names the same few keys
 * thousands of times: a key string made afresh each time must also be
 * internalized by V8 when it becomes a property, and the two cost more than
 * the rest of the reading (6x the time of the same objects built with keys
 * known before). Only short ASCII keys are kept (their string is their bytes),
 * and a slot holds the last key that hashed to it: at most KEY_SLOTS strings.
 */
const KEY_SLOTS = 4096;
const MAX_KEPT_KEY = 32;
const keptKeys: (string | undefined)[] = new Array<string | undefined>(KEY_SLOTS).fill(undefined);

/** Reads a key (a string field's length and text) as reader.string() does, from the kept keys when it can. */
function readKey({ reader, bytes }: StructSource): string {
  const at = reader.pos;
  const length = bytes[at];
  const start = at + 1;
  // a length of one byte (under 0x80) that the bytes hold; anything else as reader.string() reads it
  if (length === undefined || length > MAX_KEPT_KEY || start + length > reader.len) return reader.string();
  let hash = length;
  for (let i = start; i < start + length; i++) {
    const byte = bytes[i]!;
    if (byte > 0x7f) return reader.string();
    hash = (Math.imul(hash, 31) + byte) | 0;
  }
  const slot = hash & (KEY_SLOTS - 1);
  const kept = keptKeys[slot];
  if (kept?.length === length && sameAscii(kept, bytes, start)) {
    reader.pos = start + length;
    return kept;
  }
  const key = reader.string();
  keptKeys[slot] = key;
  return key;
}

function sameAscii(text: string, bytes: Uint8Array, start: number): boolean {
  for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) !== bytes[start + i]) return false;
  return true;
}

/** Reads one Struct.fields entry into `object`. */
function readEntry(source: StructSource, length: number, depth: number, object: JsonObject): void {
  if (depth >= MAX_DEPTH) throw tooDeep();
  const { reader } = source;
  const end = reader.pos + length;
  let key = '';
  let value: unknown;
  while (reader.pos < end) {
    const tag = reader.uint32();
    if (tag === ENTRY_KEY) key = readKey(source);
    else if (tag === ENTRY_VALUE) value = readValue(source, reader.uint32(), depth + 1);
    else if (!skipField(reader, tag)) break;
  }
  if (value !== undefined && key !== '__proto__') object[key] = value;
}

/** Reads a Value as the JSON value it holds (undefined for none). */
function readValue(source: StructSource, length: number, depth: number): unknown {
  if (depth >= MAX_DEPTH) throw tooDeep();
  const { reader } = source;
  const end = reader.pos + length;
  let value: unknown;
  while (reader.pos < end) {
    const tag = reader.uint32();
    if (tag === NULL_VALUE) {
      reader.int32();
      value = null;
    } else if (tag === NUMBER_VALUE) value = reader.double();
    else if (tag === STRING_VALUE) value = reader.string();
    else if (tag === BOOL_VALUE) value = reader.bool();
    else if (tag === STRUCT_VALUE) value = readStruct(source, reader.uint32(), depth + 1);
    else if (tag === LIST_VALUE) value = readList(source, reader.uint32(), depth + 1);
    else if (!skipField(reader, tag)) break;
  }
  return value;
}

/** Reads a ListValue as an array. */
function readList(source: StructSource, length: number, depth: number): unknown[] {
  if (depth >= MAX_DEPTH) throw tooDeep();
  const { reader } = source;
  const end = reader.pos + length;
  const list: unknown[] = [];
  while (reader.pos < end) {
    const tag = reader.uint32();
    if (tag === LIST_ITEM) list.push(readValue(source, reader.uint32(), depth + 1));
    else if (!skipField(reader, tag)) break;
  }
  return list;
}
