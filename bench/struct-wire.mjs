// In-process micro-benchmark of the request bodies on the gRPC wire (no servers):
// an ingest batch of 500 readings and a sample's create body, encoded and decoded
// by the generated code (Struct.wrap + encode, decode + Struct.unwrap), by
// struct-wire.ts (recordsWire / telemetryWire), and, for scale, by
// JSON.stringify / JSON.parse (the body as the gateway gets it from HTTP). Prints
// the median of BENCH_ROUNDS rounds (each the mean of a timed loop of
// BENCH_ROUND_MS, the six taken in turn) in microseconds per message. Needs the
// build (npm run build); run it with the stack's Node.js (npm exec -- node
// bench/struct-wire.mjs).
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

/**
 * Median of ROUNDS rounds of each of `fns`, the rounds taken in turn (one of
 * each, then again) so that the drift of a shared machine hits all alike.
 */
function measure(fns) {
  for (const fn of Object.values(fns)) round(fn); // warm-up
  const times = Object.fromEntries(Object.keys(fns).map((k) => [k, []]));
  for (let r = 0; r < ROUNDS; r++) for (const [k, fn] of Object.entries(fns)) times[k].push(round(fn));
  return Object.fromEntries(Object.entries(times).map(([k, xs]) => [k, median(xs)]));
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
  const r = measure({
    generatedEncode: () => c.method.requestSerialize(c.request),
    directEncode: () => c.fast.requestSerialize(c.request),
    stringify: () => Buffer.from(JSON.stringify(c.request.body)),
    generatedDecode: () => c.method.requestDeserialize(bytes),
    directDecode: () => c.fast.requestDeserialize(bytes),
    parse: () => JSON.parse(json),
  });
  console.log(`${c.name} (${bytes.length} bytes as Struct, ${json.length} as JSON)`);
  console.log(`  encode: generated ${us(r.generatedEncode)}  direct ${us(r.directEncode)}  JSON.stringify ${us(r.stringify)}`);
  console.log(`  decode: generated ${us(r.generatedDecode)}  direct ${us(r.directDecode)}  JSON.parse     ${us(r.parse)}`);
}
