import { makeGenericClientConstructor } from '@grpc/grpc-js';
import { BinaryReader, BinaryWriter, WireType } from '@bufbuild/protobuf/wire';
import * as records from './lab/common/v1/records.js';
import * as telemetry from './lab/telemetry/v1/telemetry.js';
import { readStruct, skipField, writeStruct } from './struct-wire.js';

/**
 * The requests that carry a client's JSON body as a google.protobuf.Struct,
 * encoded and decoded through struct-wire.ts instead of the generated
 * Struct.wrap/Value objects, and the service definitions and clients that use
 * them (`recordsWire`, `telemetryWire`): gateways and services take these
 * instead of the generated ones. The bytes are the generated code's; only the
 * work to make and read them is less.
 */

/** The kinds of field these requests have, as the generated code writes and reads them. */
type Kind = 'string' | 'bool' | 'struct';
type KindOf<V> = V extends string ? 'string' : V extends boolean ? 'bool' : 'struct';

/**
 * A request's fields by name, with their number and kind, in the order the
 * generated code declares them (its encode writes them in that order, its
 * decode makes them in it). Every field of the message must be named: a field
 * added to the proto fails to compile here, and the unit test compares the
 * names with the generated message's.
 */
type FieldSpecs<T> = { [K in keyof Required<T>]: { no: number; kind: KindOf<NonNullable<T[K]>> } };

/** How one request message is written and read. */
export interface MessageCodec<T> {
  /** the message's fields in their declared order */
  readonly fields: readonly string[];
  encode(message: T, writer: BinaryWriter): BinaryWriter;
  decode(bytes: Uint8Array): T;
}

const WIRE_TYPE: Record<Kind, WireType> = { string: WireType.LengthDelimited, bool: WireType.Varint, struct: WireType.LengthDelimited };

interface Field {
  name: string;
  tag: number;
  kind: Kind;
}

/** The unset value of a field, as the generated createBase gives it. */
const unset = (kind: Kind): unknown => (kind === 'string' ? '' : kind === 'bool' ? false : undefined);

function messageCodec<T>(specs: FieldSpecs<T>): MessageCodec<T> {
  const fields: Field[] = Object.entries(specs as Record<string, { no: number; kind: Kind }>).map(([name, { no, kind }]) => ({
    name,
    tag: (no << 3) | WIRE_TYPE[kind],
    kind,
  }));
  const byNumber = new Map(fields.map((f) => [f.tag >>> 3, f]));
  return {
    fields: fields.map((f) => f.name),
    encode(message, writer) {
      const m = message as Record<string, unknown>;
      for (const { name, tag, kind } of fields) {
        const value = m[name];
        // the generated conditions as they are: a field missing at run time is written as it writes it
        if (kind === 'string') {
          if (value !== '') writer.uint32(tag).string(value as string);
        } else if (kind === 'bool') {
          if (value !== false) writer.uint32(tag).bool(value as boolean);
        } else if (value !== undefined) {
          writer.uint32(tag).fork();
          writeStruct(writer, value as object);
          writer.join();
        }
      }
      return writer;
    },
    decode(bytes) {
      const reader = new BinaryReader(bytes);
      const source = { reader, bytes };
      const message: Record<string, unknown> = {};
      for (const f of fields) message[f.name] = unset(f.kind);
      while (reader.pos < reader.len) {
        const tag = reader.uint32();
        const field = byNumber.get(tag >>> 3);
        if (field?.tag === tag) {
          message[field.name] = field.kind === 'string' ? reader.string() : field.kind === 'bool' ? reader.bool() : readStruct(source, reader.uint32(), 1);
          continue;
        }
        if (!skipField(reader, tag)) break;
      }
      return message as T;
    },
  };
}

export const bodyRequestCodec = messageCodec<telemetry.BodyRequest>({ body: { no: 2, kind: 'struct' } });

export const pointWriteRequestCodec = messageCodec<telemetry.PointWriteRequest>({
  org_id: { no: 1, kind: 'string' },
  point_id: { no: 2, kind: 'string' },
  body: { no: 4, kind: 'struct' },
});

export const createRecordRequestCodec = messageCodec<records.CreateRecordRequest>({
  resource: { no: 1, kind: 'string' },
  body: { no: 4, kind: 'struct' },
  parent_id: { no: 3, kind: 'string' },
});

export const updateRecordRequestCodec = messageCodec<records.UpdateRecordRequest>({
  resource: { no: 1, kind: 'string' },
  id: { no: 2, kind: 'string' },
  body: { no: 6, kind: 'struct' },
  replace: { no: 4, kind: 'bool' },
  parent_id: { no: 5, kind: 'string' },
});

type RequestOf<M> = M extends { requestDeserialize: (bytes: Buffer) => infer R } ? R : never;

interface MethodDefinition {
  requestSerialize: (value: never) => Buffer;
  requestDeserialize: (bytes: Buffer) => unknown;
}

/**
 * The writer of every request, reused: a fresh one starts at 128 bytes and
 * doubles, allocating and copying, to the size of an ingest batch; this one
 * keeps its buffer from call to call (up to the size of KEPT_BUFFER).
 * Encoding is synchronous, so no two requests share it at once.
 */
let writer = new BinaryWriter();
const KEPT_BUFFER = 1 << 20;

function serialize(codec: MessageCodec<unknown>, value: unknown): Buffer {
  let bytes: Uint8Array;
  try {
    bytes = codec.encode(value, writer).finish();
  } catch (err) {
    // a value that cannot be written leaves the writer midway
    writer = new BinaryWriter();
    throw err;
  }
  // a buffer is at most twice the largest bytes it held: one grown past KEPT_BUFFER is not kept
  if (bytes.length > KEPT_BUFFER / 2) writer = new BinaryWriter();
  // finish() copied the bytes out of the writer: the Buffer takes them as they are
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/**
 * `definition` with the requests of the methods named in `codecs` written and
 * read by those codecs (the client's requestSerialize, the server's
 * requestDeserialize); every other method as generated.
 */
function withStructBodies<D extends Record<string, MethodDefinition>>(definition: D, codecs: { [K in keyof D]?: MessageCodec<RequestOf<D[K]>> }): D {
  const derived: Record<string, MethodDefinition> = { ...definition };
  for (const [method, codec] of Object.entries(codecs) as [string, MessageCodec<unknown>][]) {
    derived[method] = {
      ...definition[method]!,
      requestSerialize: (value: unknown) => serialize(codec, value),
      requestDeserialize: (bytes: Buffer) => codec.decode(bytes),
    };
  }
  return derived as D;
}

const recordService = withStructBodies(records.RecordServiceService, {
  createRecord: createRecordRequestCodec,
  updateRecord: updateRecordRequestCodec,
});

const telemetryService = withStructBodies(telemetry.TelemetryServiceService, {
  createPoint: pointWriteRequestCodec,
  updatePoint: pointWriteRequestCodec,
  deletePoint: pointWriteRequestCodec,
  ingestReadings: bodyRequestCodec,
  registerDevice: bodyRequestCodec,
  ingestResult: bodyRequestCodec,
  connectorHeartbeat: bodyRequestCodec,
});

/** lab.common.v1.RecordService with its bodies through struct-wire.ts: `service` for servers, `Client` for clients. */
export const recordsWire = {
  service: recordService,
  Client: makeGenericClientConstructor(recordService, 'lab.common.v1.RecordService') as unknown as typeof records.RecordServiceClient,
};

/** lab.telemetry.v1.TelemetryService with its bodies through struct-wire.ts. */
export const telemetryWire = {
  service: telemetryService,
  Client: makeGenericClientConstructor(telemetryService, 'lab.telemetry.v1.TelemetryService') as unknown as typeof telemetry.TelemetryServiceClient,
};
