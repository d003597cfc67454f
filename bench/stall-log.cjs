// Preload (BENCH_NODE_FLAGS="-r ./bench/stall-log.cjs" BENCH_LOG_DIR=<dir>) that writes,
// with epoch milliseconds, every GC pause over 4 ms and every event-loop lag over 20 ms
// of a process to its stderr: set beside bench/paced-get.mjs's slow requests (it prints
// when each was due), they tell which process stalled and whether a collection did it.
const { constants, PerformanceObserver, performance } = require('node:perf_hooks');

const origin = performance.timeOrigin;
const KINDS = {
  [constants.NODE_PERFORMANCE_GC_MINOR]: 'scavenge',
  [constants.NODE_PERFORMANCE_GC_MINOR_MARK_SWEEP]: 'minor-ms',
  [constants.NODE_PERFORMANCE_GC_MAJOR]: 'mark-compact',
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weak-callbacks',
};
new PerformanceObserver((list) => {
  for (const e of list.getEntries())
    if (e.duration > 4)
      process.stderr.write(`STALL gc ${(origin + e.startTime).toFixed(0)} ${KINDS[e.detail?.kind] ?? e.detail?.kind} ${e.duration.toFixed(1)}\n`);
}).observe({ entryTypes: ['gc'] });

let last = performance.now();
setInterval(() => {
  const now = performance.now();
  if (now - last > 20) process.stderr.write(`STALL lag ${(origin + last).toFixed(0)} ${(now - last - 5).toFixed(1)}\n`);
  last = now;
}, 5).unref();
