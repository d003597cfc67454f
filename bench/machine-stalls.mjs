// What the machine itself did to a run's tail. A saturated run's p99 is the
// stack's own spread plus whatever takes the CPUs away from every process at once.
// On the 2-core development VMs that is the kernel's DAMON thread (kdamond): it
// samples the physical memory's access bits every `sample_us` (500 ms there), and
// each pass holds a CPU for tens of milliseconds, so every process on the machine,
// idle or busy, waits at the same instants. A saturated GET then has its slow
// requests in bursts 540 ms apart, all 64 connections slow at once (measured:
// docs/benchmarks.md, "2026-11-27 (late night)").
//
// `watchMachine()` starts an idle probe process (a 5 ms timer and nothing else:
// it waits only when no CPU is free for it) and reads kdamond's CPU time;
// `stop()` gives the probe's waits over 10 ms and kdamond's share, so each
// recorded run says whether the machine stalled under it.
import { spawn } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import os from 'node:os';

const DAMON = '/sys/kernel/mm/damon/admin/kdamonds';

/** Each running kdamond: its pid and how often it samples (ms), from DAMON's sysfs. */
function kdamonds() {
  try {
    return readdirSync(DAMON)
      .filter((d) => /^\d+$/.test(d))
      .flatMap((d) => {
        const at = (p) => readFileSync(`${DAMON}/${d}/${p}`, 'utf8').trim();
        if (at('state') !== 'on') return [];
        return [{ pid: Number(at('pid')), sample_ms: Number(at('contexts/0/monitoring_attrs/intervals/sample_us')) / 1000 }];
      });
  } catch {
    return []; // no DAMON on this kernel, or not readable
  }
}

/** Milliseconds of CPU in one clock tick of /proc's counters (USER_HZ is 100 on Linux). */
const TICK_MS = 1000 / 100;

/** CPU milliseconds a process has used (user and system). */
export function cpuMs(pid) {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(f[11]) + Number(f[12])) * TICK_MS;
  } catch {
    return 0;
  }
}

const PROBE = `
let last = performance.now();
setInterval(() => {
  const now = performance.now();
  const late = now - last - 5;
  if (late > 10) process.stdout.write(late.toFixed(1) + '\\n');
  last = now;
}, 5);`;

export function watchMachine() {
  const daemons = kdamonds();
  const before = daemons.map((k) => cpuMs(k.pid));
  const started = performance.now();
  const probe = spawn(process.execPath, ['-e', PROBE], { stdio: ['ignore', 'pipe', 'ignore'] });
  const waits = [];
  probe.stdout.on('data', (b) => waits.push(...b.toString().trim().split('\n').map(Number)));
  return {
    stop() {
      probe.kill();
      const seconds = (performance.now() - started) / 1000;
      return {
        idle_probe_waits_over_10ms: waits.length,
        idle_probe_worst_wait_ms: waits.length ? Math.round(Math.max(...waits)) : 0,
        damon: daemons.length
          ? daemons.map((k, i) => `kdamond sampling every ${k.sample_ms} ms, ${((cpuMs(k.pid) - before[i]) / (10 * seconds)).toFixed(1)}% of a CPU`).join('; ')
          : 'off',
      };
    },
  };
}

/**
 * How busy the whole machine was while a run lasted: every process's CPU time, the
 * load generator's and the probe's included, from /proc/stat's first line. A paced
 * run whose queue grows while the machine's cores are all busy asked for more CPU
 * than the machine has; one whose queue grows with cores to spare waited on
 * something else. `stop()` gives the cores, the busy share of them and the busy
 * CPU milliseconds (0 and null where /proc/stat cannot be read).
 */
export function watchBusy() {
  const read = () => {
    try {
      const [, ...f] = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).map(Number);
      const idle = f[3] + f[4]; // idle and iowait
      // up to steal (time the hypervisor gave elsewhere counts as busy: the cores were not
      // the run's); guest time is already in user
      const total = f.slice(0, 8).reduce((a, b) => a + b, 0);
      return { busy: total - idle, total };
    } catch {
      return undefined;
    }
  };
  const before = read();
  const cores = os.availableParallelism();
  return {
    stop() {
      const after = read();
      if (!before || !after || after.total === before.total) return { cores, busy_share: null, busy_cpu_ms: 0 };
      return {
        cores,
        busy_share: (after.busy - before.busy) / (after.total - before.total),
        busy_cpu_ms: (after.busy - before.busy) * TICK_MS,
      };
    },
  };
}

/** One line for a scenario's output. */
export const describeMachine = (m) =>
  `machine: an idle process waited over 10 ms ${m.idle_probe_waits_over_10ms} times (worst ${m.idle_probe_worst_wait_ms} ms); DAMON ${m.damon}`;
