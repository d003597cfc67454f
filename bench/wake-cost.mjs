// What a process pays to be woken for one message, on this machine. A request through
// the cluster wakes several processes (gateway, service, PostgreSQL, Redis) where the
// one-process baseline wakes one and PostgreSQL; each wake-up costs CPU beyond the
// work it does, and how much depends on the machine: on a loaded process the next
// message is already waiting, on an idle one the CPU was halted (on a VM, often a trip
// to the hypervisor and back). So a paced load, which leaves processes idle between
// requests, costs more CPU per request than a saturated one, and how much more is a
// property of the machine the scenario ran on: the paced scenarios (bench/mixed.mjs)
// record it beside their figures.
//
// Measured with two processes echoing a 200-byte message over loopback TCP: back to
// back (the echo process is always busy) and paced at `rate` messages per second; the
// figure is the echo process's CPU per message, which does nothing but read and write.
// `node bench/wake-cost.mjs [rate]` prints it.
import { fork } from 'node:child_process';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { cpuMs } from './machine-stalls.mjs';

const self = fileURLToPath(import.meta.url);

/** Round trips for `seconds`, back to back (rate 0) or paced; the echo process's CPU per message. */
async function echoCost(port, pid, rate, seconds) {
  const sock = net.connect(port, '127.0.0.1');
  await new Promise((resolve) => sock.once('connect', resolve));
  sock.setNoDelay(true);
  const msg = Buffer.alloc(200, 1);
  let n = 0;
  const before = cpuMs(pid);
  const start = performance.now();
  await new Promise((resolve) => {
    const send = () => sock.write(msg);
    sock.on('data', () => {
      n++;
      if (performance.now() - start > seconds * 1000) return resolve();
      if (!rate) send();
      else setTimeout(send, Math.max(0, start + (n * 1000) / rate - performance.now()));
    });
    send();
  });
  sock.destroy();
  return ((cpuMs(pid) - before) * 1000) / n;
}

/**
 * The echo process's CPU microseconds per message, back to back and paced at `rate`
 * per second; `ratio` is paced / back to back (1 on a machine where waking is free).
 */
export async function measureWakeCost({ rate = 1000, seconds = 3 } = {}) {
  const echo = fork(self, ['echo'], { stdio: ['ignore', 'ignore', 'ignore', 'ipc'] });
  try {
    const port = await new Promise((resolve) => echo.once('message', resolve));
    const busy = await echoCost(port, echo.pid, 0, seconds);
    const paced = await echoCost(port, echo.pid, rate, seconds);
    return { rate, back_to_back_us: Math.round(busy), paced_us: Math.round(paced), ratio: Number((paced / busy).toFixed(1)) };
  } finally {
    echo.kill();
  }
}

/** One line for a scenario's output. */
export const describeWakeCost = (w) =>
  `wake-up cost: an echo process used ${w.paced_us} us of CPU per message at ${w.rate}/s, ${w.back_to_back_us} us back to back (x${w.ratio})`;

if (process.argv[2] === 'echo') {
  const server = net.createServer((s) => s.on('data', (d) => s.write(d)));
  server.listen(0, '127.0.0.1', () => process.send(server.address().port));
} else if (process.argv[1] === self) {
  console.log(describeWakeCost(await measureWakeCost({ rate: Number(process.argv[2] ?? 1000) })));
}
