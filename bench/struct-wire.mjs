// In-process micro-benchmark of the request bodies on the gRPC wire (no servers):
// an ingest batch of 500 readings and a sample's create body, encoded and decoded
// by the generated code (Struct.wrap + encode, decode + Struct.unwrap), by
// struct-wire.ts (recordsWire / telemetryWire), and, for scale, by
// JSON.stringify / JSON.parse. Prints the median of BENCH_ROUNDS rounds (each the
// mean of a timed loop after a warm-up) in microseconds per message. Needs the
// build (npm run build).
import { records, recordsWire, telemetry, telemetryWire } from '@lab/contracts';
import { INGEST_BATCH, ingestValueAt } from './cluster.mjs';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
const ROUND_MS = Number(process.env.BENCH_ROUND_MS ?? 300);
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** Mean microseconds of one call of fn, over a loop of about ROUND_MS. */
function round(fn) {
  let n = 0;
  const start = performance.now();
  let now = start;
  while (now - start < ROUND_MS) {
    for (let i = 0; i < 20; i++) fn();
    n += 20;
    now = performance.now();
  }
  return ((now - start) * 1000) / n;
}

function measure(fn) {
  round(fn); // warm-up
  return median(Array.from({ length: ROUNDS }, () => round(fn)));
}

const POINT = '0190a0c8-0000-7000-8000-00000000000a';
const cases = [
  {
    // the batch bench/ingest.mjs sends: readings by point code
    name: `ingest batch, ${INGEST_BATCH} readings by code`,
    method: telemetry.TelemetryServiceService.ingestReadings,
    fast: telemetryWire.service.ingestReadings,
    request: { body: { readings: Array.from({ length: INGEST_BATCH }, (_, i) => ({ external_code: `room-${i % 10}`, value: ingestValueAt(i) })) } },
  },
  {
    // a batch with every reading field a connector may give
    name: `ingest batch, ${INGEST_BATCH} full readings`,
    method: telemetry.TelemetryServiceService.ingestReadings,
    fast: telemetryWire.service.ingestReadings,
    request: {
      body: {
        readings: Array.from({ length: INGEST_BATCH }, (_, i) => ({
          point_id: POINT,
          value: ingestValueAt(i),
          unit: 'C',
          measured_at: new Date(Date.UTC(2026, 10, 26, 10, 0, i)).toISOString(),
          notes: i % 10 === 0 ? 'door open' : null,
        })),
      },
    },
  },
  {
    name: 'sample create',
    method: records.RecordServiceService.createRecord,
    fast: recordsWire.service.createRecord,
    request: {
      resource: 'samples',
      body: { name: 'S-0001 plasma', type: 'blood', status: 'received', owner_id: POINT, storage_location: 'freezer B, rack 2' },
      parent_id: '',
    },
  },
];

const us = (x) => x.toFixed(x < 10 ? 2 : 0).padStart(7);
console.log(`struct-wire (${ROUNDS} rounds of ${ROUND_MS} ms, median, us per message), node ${process.version}`);
for (const c of cases) {
  const bytes = c.method.requestSerialize(c.request);
  if (!bytes.equals(c.fast.requestSerialize(c.request))) throw new Error(`${c.name}: the bytes differ`);
  const json = JSON.stringify(c.request.body);
  const r = {
    generatedEncode: measure(() => c.method.requestSerialize(c.request)),
    directEncode: measure(() => c.fast.requestSerialize(c.request)),
    stringify: measure(() => Buffer.from(JSON.stringify(c.request.body))),
    generatedDecode: measure(() => c.method.requestDeserialize(bytes)),
    directDecode: measure(() => c.fast.requestDeserialize(bytes)),
    parse: measure(() => JSON.parse(json)),
  };
  console.log(`${c.name} (${bytes.length} bytes as Struct, ${json.length} as JSON)`);
  console.log(`  encode: generated ${us(r.generatedEncode)}  direct ${us(r.directEncode)}  JSON.stringify ${us(r.stringify)}`);
  console.log(`  decode: generated ${us(r.generatedDecode)}  direct ${us(r.directDecode)}  JSON.parse     ${us(r.parse)}`);
}
