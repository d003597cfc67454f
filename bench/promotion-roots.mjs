// Which per-call objects the running Node.js keeps until a mark-compact. V8 allocates a
// closure in the old generation when its function literal is assigned straight to a
// property (`obj.cb = () => ...`: its parser takes that for a method being installed),
// and a scavenge treats old objects as live: the closure's context, and everything the
// context reaches, outlives every scavenge and is promoted. Node.js 24.15.0 turned the
// Writable stream's write callback into such a literal (`this.onwrite = (er) =>
// onwrite(stream, er)` in WritableState), so from that release every Writable or Duplex
// (an HTTP/2 stream on both ends of a gRPC call, grpc-js's server call object) keeps
// its whole call until the next mark-compact; 24.14.1 and earlier do not (measured:
// docs/decisions/040-promotion-roots.md).
//
// Each case makes BENCH_OBJECTS objects every 10 ms in a child process of this Node.js
// that forces a scavenge every 100 ms and no mark-compact, and reports the bytes
// promoted per object (from --trace-gc-nvp). Near 0: the object died young. Run with
// the stack's Node.js (npm exec -- node bench/promotion-roots.mjs) or any other
// (path/to/node bench/promotion-roots.mjs) to see whether a release still does it.
import { spawnSync } from 'node:child_process';

const PER_TICK = Number(process.env.BENCH_OBJECTS ?? 10);

const CASES = {
  'plain object holding a closure made first': `const cb = (er) => f(o, er); o.cb = cb;`,
  'closure literal assigned to a property': `o.cb = (er) => f(o, er);`,
  'stream.Writable (WritableState.onwrite)': `const w = new Writable({ write(c, e, done) { done(); } }); w.end('x'); o.w = w;`,
};

const child = (body) => `
const { Writable } = require('node:stream');
function f() {}
function one() { const o = { payload: new Array(50).fill(1) }; ${body} }
let warm = 0;
const w = setInterval(() => { for (let i = 0; i < ${PER_TICK}; i++) one(); if (++warm === 200) { clearInterval(w); measure(); } }, 1);
function measure() {
  globalThis.gc();
  console.error('measured from ' + Math.round(performance.now()));
  const s = setInterval(() => globalThis.gc({ type: 'minor' }), 100);
  const t = setInterval(() => { for (let i = 0; i < ${PER_TICK}; i++) one(); }, 10);
  setTimeout(() => { clearInterval(s); clearInterval(t); process.exit(0); }, 2000);
}`;

/** Bytes promoted per object: the scavenges of the measured phase, first two left out (warming). */
function promotedPerObject(body) {
  const run = spawnSync(process.execPath, ['--expose-gc', '--trace-gc-nvp', '-e', child(body)], { encoding: 'utf8' });
  const from = Number(/measured from (\d+)/.exec(run.stderr)?.[1]);
  // one line per collection, stamped with ms since the process started: name=value
  // pairs (Node.js 20-24) or a JSON object (Node.js 26)
  const promoted = run.stdout
    .split('\n')
    .filter((l) => Number(/\s(\d+) ms: /.exec(l)?.[1]) > from && /gc[=":]+s\b/.test(l))
    .map((l) => Number(/[ ,"]promoted"?[=:](\d+)/.exec(l)?.[1]))
    .slice(2);
  if (!Number.isFinite(from) || promoted.length === 0) throw new Error(`no scavenges measured:\n${run.stderr.slice(0, 2000)}`);
  const mean = promoted.reduce((a, b) => a + b, 0) / promoted.length;
  // a scavenge every 100 ms, PER_TICK objects every 10 ms
  return mean / (PER_TICK * 10);
}

console.log(`Node.js ${process.version} (V8 ${process.versions.v8}): bytes promoted per object, ${PER_TICK * 100} objects/s, a scavenge every 100 ms`);
for (const [name, body] of Object.entries(CASES)) console.log(`  ${name.padEnd(44)} ${promotedPerObject(body).toFixed(0).padStart(6)}`);
