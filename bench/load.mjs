// One saturated autocannon run and the median (min-max) figures of several: what
// the request scenarios (read-write, scale-out) measure with.
import autocannon from 'autocannon';

export const RUNS = Number(process.env.BENCH_RUNS ?? 3);
export const DURATION = Number(process.env.BENCH_SECONDS ?? 8);
export const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);
/**
 * Seconds of unmeasured load on stack and baseline before each scenario's runs.
 * V8 first compiles a hot function with Maglev and only after many more calls
 * with TurboFan; in the stack that second tier arrives for dozens of per-request
 * functions at once, in every process (about 10,000 requests in: half a second
 * of both cores compiling, measured with --trace-opt), so an unwarmed first run
 * measures the start-up of the processes rather than their steady state.
 */
export const WARMUP = Number(process.env.BENCH_WARMUP ?? 10);

/** `CONNECTIONS` connections for `duration` seconds; `idempotent` sends a fresh Idempotency-Key per request. */
export function load(url, { token, method = 'GET', body, idempotent = false, duration = DURATION }) {
  let n = 0;
  const prefix = `bench-${Date.now()}-${Math.random().toString(36).slice(2)}`;
  return new Promise((resolve, reject) => {
    autocannon(
      {
        url,
        method,
        connections: CONNECTIONS,
        duration,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
        // A fresh key per request. autocannon reads setupRequest only from the
        // entries of `requests`; at the top level it is silently ignored.
        requests: idempotent ? [{ setupRequest: (req) => ({ ...req, headers: { ...req.headers, 'idempotency-key': `${prefix}-${n++}` } }) }] : undefined,
      },
      (err, r) => (err ? reject(err) : resolve({ rps: r.requests.average, p50: r.latency.p50, p99: r.latency.p99, non2xx: r.non2xx, errors: r.errors })),
    );
  });
}

export const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
export const fmt = (xs, d = 0) => `${median(xs).toFixed(d)} (${Math.min(...xs).toFixed(d)}-${Math.max(...xs).toFixed(d)})`;
