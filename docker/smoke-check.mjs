#!/usr/bin/env node
// Smoke check of a running deployment, from inside the cluster: the chart's
// `helm test` Pod runs it (templates/tests/smoke-test.yaml), and so can any pod
// of the image: `kubectl exec deploy/lab-gateway -- node docker/smoke-check.mjs`.
//
//   SMOKE_HTTP        space-separated `name=url` (or bare url): each must answer 2xx to GET
//   SMOKE_GRPC        space-separated `name=target`, any gRPC target (dns:///host:port,
//                     ipv4:a:port,b:port, host:port): each must answer SERVING to
//                     grpc.health.v1.Health/Check; unset: every <NAME>_ADDR variable
//   SMOKE_GRPC_SERVICE  the health service name asked for; default "" (the whole server)
//   SMOKE_TIMEOUT_MS  how long every check may keep trying, in all; default 30000
//
// Checks run side by side and retry (a pod still starting, a name not yet in DNS)
// until they pass or the time is up. Exit 0 when all pass; 1 naming each check
// that did not, with its last error; 2 when there is nothing (valid) to check.
import grpc from '@grpc/grpc-js';
import healthCheck from 'grpc-health-check';

const RETRY_MS = 500;
const ATTEMPT_MS = 5_000;
const started = Date.now();

function usage(message) {
  console.error(`smoke check: ${message}`);
  process.exit(2);
}

/** `name=value` entries separated by white space; a bare value is named by itself. */
function entries(text) {
  return (text ?? '')
    .split(/\s+/)
    .filter(Boolean)
    .map((e) => {
      const i = e.indexOf('=');
      // a URL's query may hold '=': only a name before any ':' or '/' counts
      return i > 0 && !/[:/]/.test(e.slice(0, i)) ? { name: e.slice(0, i), value: e.slice(i + 1) } : { name: e, value: e };
    });
}

function grpcTargets(env) {
  if (env.SMOKE_GRPC !== undefined) return entries(env.SMOKE_GRPC);
  return Object.keys(env)
    .filter((k) => /^[A-Z][A-Z0-9_]*_ADDR$/.test(k) && env[k])
    .sort()
    .map((k) => ({ name: k.slice(0, -'_ADDR'.length).toLowerCase().replace(/_/g, '-'), value: env[k] }));
}

const timeoutMs = Number(process.env.SMOKE_TIMEOUT_MS ?? 30_000);
if (!Number.isFinite(timeoutMs) || timeoutMs <= 0)
  usage(`SMOKE_TIMEOUT_MS must be a positive number of milliseconds, not ${JSON.stringify(process.env.SMOKE_TIMEOUT_MS)}`);
const deadline = started + timeoutMs;
const healthService = process.env.SMOKE_GRPC_SERVICE ?? '';
const http = entries(process.env.SMOKE_HTTP);
const rpc = grpcTargets(process.env);
if (http.length + rpc.length === 0) usage('nothing to check: set SMOKE_HTTP and/or SMOKE_GRPC (or <NAME>_ADDR variables)');
for (const { name, value } of http) {
  if (!/^https?:\/\//.test(value)) usage(`${name}: ${value} is not an http(s) URL`);
}

// Calls are spread over every address the target resolves to, as the services do.
const CHANNEL_OPTIONS = {
  'grpc.service_config': JSON.stringify({ loadBalancingConfig: [{ round_robin: {} }] }),
  'grpc.initial_reconnect_backoff_ms': 200,
  'grpc.max_reconnect_backoff_ms': 1_000,
  'grpc.dns_min_time_between_resolutions_ms': 1_000,
};
const HealthClient = grpc.makeClientConstructor(healthCheck.service, 'grpc.health.v1.Health');
const clients = [];

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const attemptBudget = () => Math.max(1, Math.min(ATTEMPT_MS, deadline - Date.now()));

/** An error's message with its cause's (fetch says only "fetch failed"). */
function describe(err) {
  if (!(err instanceof Error)) return String(err);
  const cause = err.cause instanceof Error ? err.cause.message : undefined;
  return cause && !err.message.includes(cause) ? `${err.message}: ${cause}` : err.message;
}

/** An attempt's own time ran out (not the service's answer). */
class AttemptTimedOut extends Error {}

/**
 * Runs `attempt` until it resolves or the deadline passes; the outcome carries the
 * last error, except that a last try cut short by the overall deadline does not hide
 * what an earlier try learnt ("health status NOT_SERVING" says more than a timeout
 * that only means the time was up).
 */
async function untilDeadline(kind, name, target, attempt) {
  const t0 = Date.now();
  let tries = 0;
  let last = 'not tried';
  for (;;) {
    tries += 1;
    const cutShort = deadline - Date.now() < ATTEMPT_MS;
    try {
      const detail = await attempt();
      return { ok: true, kind, name, target, detail, ms: Date.now() - t0, tries };
    } catch (err) {
      if (!(err instanceof AttemptTimedOut && cutShort && tries > 1)) last = describe(err);
    }
    if (Date.now() + RETRY_MS >= deadline) break;
    await sleep(RETRY_MS);
  }
  return { ok: false, kind, name, target, detail: last, ms: Date.now() - t0, tries };
}

function checkHttp({ name, value: url }) {
  return untilDeadline('http', name, url, async () => {
    const res = await fetch(url, { signal: AbortSignal.timeout(attemptBudget()), headers: { accept: 'application/json' } }).catch((err) => {
      throw err?.name === 'TimeoutError' ? new AttemptTimedOut(`timed out: ${describe(err)}`) : err;
    });
    const body = (await res.text()).slice(0, 200).replace(/\s+/g, ' ');
    if (!res.ok) throw new Error(`HTTP ${res.status} ${body}`);
    return `HTTP ${res.status}`;
  });
}

function checkGrpc({ name, value: target }) {
  let client;
  try {
    client = new HealthClient(target, grpc.credentials.createInsecure(), CHANNEL_OPTIONS);
    clients.push(client);
  } catch (err) {
    return Promise.resolve({ ok: false, kind: 'grpc', name, target, detail: `not a usable gRPC target: ${err.message}`, ms: 0, tries: 1 });
  }
  return untilDeadline(
    'grpc',
    name,
    target,
    () =>
      new Promise((resolve, reject) => {
        client.Check({ service: healthService }, { deadline: Date.now() + attemptBudget() }, (err, res) => {
          if (err) {
            const Failure = err.code === grpc.status.DEADLINE_EXCEEDED ? AttemptTimedOut : Error;
            return reject(new Failure(`${grpc.status[err.code] ?? err.code}: ${err.details || err.message}`));
          }
          if (res?.status !== 'SERVING') return reject(new Error(`health status ${res?.status ?? 'missing'}`));
          resolve('SERVING');
        });
      }),
  );
}

// A last guard: whatever hangs, the process ends soon after its deadline.
setTimeout(() => {
  console.error(`smoke check failed: still running ${timeoutMs + 5_000} ms after the start`);
  process.exit(1);
}, timeoutMs + 5_000).unref();

console.log(`smoke check: ${http.length} http, ${rpc.length} grpc; up to ${timeoutMs} ms`);
const results = await Promise.all([...http.map(checkHttp), ...rpc.map(checkGrpc)]);
for (const client of clients) client.close();
for (const r of results) {
  const line = `${r.ok ? 'ok  ' : 'FAIL'}  ${r.kind.padEnd(4)}  ${r.name}  ${r.target}  ${r.detail}  (${r.ms} ms, ${r.tries} ${r.tries === 1 ? 'try' : 'tries'})`;
  (r.ok ? console.log : console.error)(line);
}
const failed = results.filter((r) => !r.ok);
if (failed.length) {
  console.error(`smoke check failed: ${failed.map((r) => `${r.name} (${r.kind} ${r.target}: ${r.detail})`).join('; ')}`);
  process.exit(1);
}
console.log(`smoke check passed: ${results.length} checks in ${Date.now() - started} ms`);
process.exit(0);
