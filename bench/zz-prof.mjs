import { telemetryWire } from '@lab/contracts';
const m = telemetryWire.service.ingestReadings;
const req = { body: { readings: Array.from({ length: 500 }, (_, i) => ({ external_code: `room-${i % 10}`, value: 4 + (i % 7) / 3 })) } };
const bytes = m.requestSerialize(req);
const which = process.argv[2];
const t = performance.now();
let n = 0;
while (performance.now() - t < 3000) { for (let i = 0; i < 20; i++) which === 'enc' ? m.requestSerialize(req) : m.requestDeserialize(bytes); n += 20; }
console.log(which, ((performance.now() - t) * 1000 / n).toFixed(1), 'us');
