// An open-loop load at an even rate over a fixed number of keep-alive connections.
// autocannon's own rate option is not that: each connection sends its quota for the
// second as fast as it can at the start of the second and then waits, so a "paced"
// run is a burst per second, and its p99 measures the burst. Here request n is due
// at start + n / rate; its latency counts from when it was due, not from when a free
// connection took it, so a stall shows in the figures instead of thinning the load.
import http from 'node:http';

const percentile = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;

/**
 * Requests `url` at `rate` requests per second for `seconds` over `connections`
 * sockets; resolves with latency percentiles (ms) and counts (`served`: answered
 * 2xx per second). GET unless `method`; a `body` (an object) is sent as JSON, and
 * `idempotent` gives every request an Idempotency-Key of its own. `timeline`, an
 * array, gets [ms since start the request was due, latency ms] of each answer.
 */
export function pacedLoad(url, { rate, seconds, connections, headers = {}, timeline, method = 'GET', body, idempotent = false }) {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  const keyPrefix = `paced-${Date.now()}-${Math.random().toString(36).slice(2)}`;
  const agent = new http.Agent({ keepAlive: true, maxSockets: connections });
  const total = Math.round(rate * seconds);
  const latencies = [];
  let errors = 0;
  let non2xx = 0;
  let sent = 0;
  let done = 0;
  return new Promise((resolve) => {
    const start = performance.now();
    const finish = () => {
      agent.destroy();
      latencies.sort((a, b) => a - b);
      resolve({
        p50: percentile(latencies, 50),
        p99: percentile(latencies, 99),
        max: latencies.at(-1),
        served: latencies.length / seconds,
        sent,
        errors,
        non2xx,
      });
    };
    const fire = (due, n) => {
      const own = { ...headers };
      if (payload !== undefined) own['content-type'] = 'application/json';
      if (idempotent) own['idempotency-key'] = `${keyPrefix}-${n}`;
      const req = http.request(url, { agent, method, headers: own }, (res) => {
        res.resume();
        res.on('end', () => {
          if (res.statusCode >= 200 && res.statusCode < 300) {
            latencies.push(performance.now() - due);
            timeline?.push([due - start, performance.now() - due]);
          } else non2xx++;
          if (++done === total) finish();
        });
      });
      req.on('error', () => {
        errors++;
        if (++done === total) finish();
      });
      req.end(payload);
    };
    const tick = () => {
      const now = performance.now();
      // every request due by now goes out, each with its own due time
      while (sent < total && start + (sent * 1000) / rate <= now) {
        const n = sent++;
        fire(start + (n * 1000) / rate, n);
      }
      if (sent < total) setTimeout(tick, 1);
    };
    tick();
  });
}

/** What a load left out (rate 0) reports. */
const NONE = { p50: NaN, p99: NaN, max: NaN, served: 0, sent: 0, errors: 0, non2xx: 0 };

/**
 * The mixed load (bench/mixed.mjs): GET by id and keyed POST of samples at once
 * against one base URL, each paced over `connections` of its own; resolves with the
 * GET and POST figures. A rate of 0 leaves that kind out.
 */
export async function mixedLoad(base, { token, sampleId, getRate, postRate, seconds, connections }) {
  const load = { seconds, connections, headers: { authorization: `Bearer ${token}` } };
  const [get, post] = await Promise.all([
    getRate > 0 ? pacedLoad(`${base}/v1/samples/${sampleId}`, { ...load, rate: getRate }) : NONE,
    postRate > 0
      ? pacedLoad(`${base}/v1/samples`, { ...load, rate: postRate, method: 'POST', body: { name: 'mixed', type: 'blood' }, idempotent: true })
      : NONE,
  ]);
  return { get, post };
}
