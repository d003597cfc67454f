// Starts the cluster shape for benchmarks: every service as its own process
// (built dist/), on this machine's PostgreSQL, RabbitMQ and Redis, each bench run
// in a fresh database and on its own events exchange.
import { spawn } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { deleteRunQueues } from '@lab/testing/queues';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
export const env = {
  DATABASE_URL: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test',
  AMQP_URL: process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672',
  REDIS_URL: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
};

/**
 * A young generation of 32 MiB semi-spaces instead of V8's 16: a request's
 * short-lived objects die in fewer, cheaper scavenges (measured here: higher
 * throughput and about half the p99 on the read path). BENCH_SERVICE_NODE_OPTIONS
 * replaces them, to compare others.
 */
export const SERVICE_NODE_OPTIONS = process.env.BENCH_SERVICE_NODE_OPTIONS ?? '--max-semi-space-size=32';

export function freePort() {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export async function freshDatabase() {
  const name = `lab_bench_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: env.DATABASE_URL });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  const url = new URL(env.DATABASE_URL);
  url.pathname = `/${name}`;
  return {
    name,
    url: url.toString(),
    drop: async () => {
      const c = new pg.Client({ connectionString: env.DATABASE_URL });
      await c.connect();
      await c.query(`drop database if exists ${name} with (force)`);
      await c.end();
    },
  };
}

/** Spawns node on a built entry and resolves once it logs `readyText`. */
export function spawnNode(entry, vars, readyText, label) {
  return new Promise((resolve, reject) => {
    const flags = process.env.BENCH_NODE_FLAGS?.split(' ').filter(Boolean) ?? [];
    const child = spawn(process.execPath, [...flags, join(root, entry)], {
      // The V8 flags the container image runs services with (docker/Dockerfile);
      // BENCH_CPU_PROF=<dir> adds a V8 CPU profile of every process on exit;
      // BENCH_NODE_FLAGS adds flags (--trace-gc, say), BENCH_LOG_DIR=<dir> keeps
      // each process's output in <dir>/<label>.log.
      env: {
        ...process.env,
        ...vars,
        NODE_OPTIONS: [
          SERVICE_NODE_OPTIONS,
          process.env.BENCH_PERF ? '--perf-basic-prof-only-functions' : '',
          process.env.BENCH_CPU_PROF ? `--cpu-prof --cpu-prof-dir=${process.env.BENCH_CPU_PROF}` : '',
        ]
          .join(' ')
          .trim(),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    if (process.env.BENCH_LOG_DIR) {
      const file = createWriteStream(join(process.env.BENCH_LOG_DIR, `${label}.log`));
      child.stdout.pipe(file);
      child.stderr.pipe(file);
    }
    const timer = setTimeout(() => reject(new Error(`${label} did not start:\n${out}`)), 30_000);
    const onData = (b) => {
      out += b.toString();
      if (out.includes(readyText)) {
        clearTimeout(timer);
        child.stdout.off('data', onData);
        child.stdout.resume();
        resolve(child);
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', (b) => (out += b.toString()));
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${label} exited with ${code}:\n${out}`));
    });
  });
}

/**
 * serviceEnv: extra environment per service name, e.g. { webhooks: { ... } };
 * replicas: processes per service (1 unless named). The replicas of a service are
 * given to its callers as one `ipv4:` target, and each serves its metrics on a
 * port of its own (`metricsUrls[service]`), so a run can read its share of calls.
 */
export async function startCluster(services = ['identity', 'notebook', 'audit'], serviceEnv = {}, { replicas = {} } = {}) {
  const db = await freshDatabase();
  const secret = randomBytes(24).toString('hex');
  const exchange = `lab.bench.${randomBytes(4).toString('hex')}`;
  const operatorToken = `op_${randomBytes(24).toString('hex')}`;
  const children = [];
  const addrs = {};
  /** host:port of each replica, by service */
  const replicaAddrs = {};
  const metricsUrls = {};
  // every process declares every queue, consumed in this cluster or not: they expire after the run
  const common = { AMQP_URL: env.AMQP_URL, LAB_INTERNAL_SECRET: secret, LAB_EVENTS_EXCHANGE: exchange, LAB_BUS_QUEUE_EXPIRES_MS: '600000', LOG_LEVEL: 'warn' };
  try {
    for (const s of services) {
      const count = replicas[s] ?? 1;
      const targets = [];
      for (let i = 1; i <= count; i++) {
        const port = await freePort();
        const metricsPort = count > 1 ? await freePort() : 0;
        children.push(
          await spawnNode(
            `services/${s}/dist/main.js`,
            {
              ...common,
              ...addrs,
              LOG_LEVEL: 'info',
              DATABASE_URL: db.url,
              GRPC_PORT: String(port),
              GRPC_HOST: '127.0.0.1',
              METRICS_PORT: String(metricsPort),
              ...serviceEnv[s],
            },
            `${s} ready`,
            count > 1 ? `${s}-${i}` : s,
          ),
        );
        targets.push(`127.0.0.1:${port}`);
        if (metricsPort) (metricsUrls[s] ??= []).push(`http://127.0.0.1:${metricsPort}`);
      }
      replicaAddrs[s] = targets;
      addrs[`${s.toUpperCase()}_ADDR`] = targets.length === 1 ? targets[0] : `ipv4:${targets.join(',')}`;
    }
    /** A gateway process over the services; `vars` override its environment. */
    const gateway = async (vars = {}) => {
      const port = await freePort();
      const gatewayEnv = {
        ...common,
        LOG_LEVEL: 'info',
        ...addrs,
        METRICS_PORT: '0',
        PORT: String(port),
        DATABASE_URL: db.url,
        REDIS_URL: env.REDIS_URL,
        LAB_OPERATOR_TOKEN: operatorToken,
      };
      for (const [k, v] of Object.entries(vars))
        if (v === undefined) delete gatewayEnv[k];
        else gatewayEnv[k] = v;
      children.push(await spawnNode('services/gateway/dist/main.js', gatewayEnv, 'gateway ready', 'gateway'));
      return `http://127.0.0.1:${port}`;
    };
    // BENCH_GATEWAY_ENV (JSON, null unsets) changes the first gateway's environment, to compare
    const url = await gateway(JSON.parse(process.env.BENCH_GATEWAY_ENV ?? '{}', (_k, v) => (v === null ? undefined : v)));
    return {
      url,
      gateway,
      replicaAddrs,
      metricsUrls,
      db,
      operatorToken,
      stop: async () => {
        for (const c of children.reverse()) {
          c.kill('SIGTERM');
          await new Promise((r) => (c.exitCode !== null ? r() : c.once('exit', r)));
        }
        await db.drop();
        // left to expire, a day of runs' quorum queues kept the broker deleting them one
        // by one, and it took a minute to accept a connection: the next cluster failed
        await deleteRunQueues(env.AMQP_URL, exchange);
      },
    };
  } catch (err) {
    for (const c of children) c.kill('SIGKILL');
    await db.drop();
    await deleteRunQueues(env.AMQP_URL, exchange);
    throw err;
  }
}

export async function api(base, method, path, token, body, headers = {}) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status >= 400) throw new Error(`${method} ${path} -> ${res.status} ${text}`);
  return text ? JSON.parse(text) : undefined;
}

/** An org without effective rate limits, an admin member and an API key acting as them. */
export async function seedOrg(base, operatorToken, modules = []) {
  const org = (await api(base, 'POST', '/admin/v1/orgs', operatorToken, { name: 'bench', modules, rate_limit: { per_minute: 1_000_000, per_hour: 1_000_000 } }))
    .data;
  const user = (await api(base, 'POST', '/admin/v1/users', operatorToken, { email: `bench-${randomBytes(4).toString('hex')}@example.org` })).data;
  await api(base, 'PUT', `/admin/v1/orgs/${org.id}/members/${user.id}`, operatorToken, { role: 'admin' });
  const key = (await api(base, 'POST', `/admin/v1/orgs/${org.id}/api-keys`, operatorToken, { name: 'bench', scopes: ['*'], user_id: user.id })).data;
  return { org, user, token: key.token };
}

/** Readings per ingest request in the ingest scenarios. */
export const INGEST_BATCH = 500;
/** Every how many readings of an ingest batch one is out of its limits: 1 in 50 (2%), as a real feed has. */
export const INGEST_BREACH_EVERY = 50;
/**
 * The value of reading i of a batch: every `breachEvery`th out of the limits (2-8),
 * the rest inside them; a `breachEvery` of 0, none out.
 */
export const ingestValueAt = (i, breachEvery = INGEST_BREACH_EVERY) => (breachEvery && i % breachEvery === 0 ? 9.5 : 4 + (i % 7) / 3);

/**
 * An organisation with the analytics_qc module and ten environmental points, and the
 * body of one ingest batch over them, every `breachEvery`th reading out of its
 * limits (0: none). The batch is sent once and must be stored whole:
 * a rate of rejected readings would measure nothing.
 */
export async function ingestFixture(base, operatorToken, breachEvery = INGEST_BREACH_EVERY) {
  const { org, user, token } = await seedOrg(base, operatorToken, ['analytics_qc']);
  const points = [];
  for (let i = 0; i < 10; i++) {
    points.push(
      (
        await api(base, 'POST', `/admin/v1/orgs/${org.id}/environmental-points`, operatorToken, {
          parameter: 'temperature',
          unit: 'C',
          external_code: `room-${i}`,
          limit_min: 2,
          limit_max: 8,
        })
      ).data,
    );
  }
  const readings = Array.from({ length: INGEST_BATCH }, (_, i) => ({ external_code: `room-${i % 10}`, value: ingestValueAt(i, breachEvery) }));
  const probe = await api(base, 'POST', '/v1/environmental-readings', token, { readings });
  if (probe.data.created !== INGEST_BATCH || probe.data.rejected.length) throw new Error(`probe batch: ${JSON.stringify(probe.data).slice(0, 300)}`);
  return { org, user, token, points, body: JSON.stringify({ readings }) };
}

/**
 * ANALYZE the whole database, as autovacuum does in its own time. Also what a
 * prepared statement's cached plan is remade on: a plan made when a table was
 * small keeps scanning it as it grows, until the next ANALYZE (decision 067).
 */
export async function gatherStatistics(url) {
  const db = new pg.Client({ connectionString: url });
  await db.connect();
  try {
    await db.query('analyze');
  } finally {
    await db.end();
  }
}

/**
 * The request scenarios' setting (read-write, mixed): the cluster shape, and the
 * one-process baseline on the same database; an org, its key and 200 samples
 * (the id of the last to read). Statistics are gathered now, not whenever
 * autovacuum comes by: without them the planner took the baseline's list by
 * another index and a sort, and some runs had them, others not.
 */
export async function startWithBaseline() {
  const cluster = await startCluster();
  let baseline;
  try {
    const baselinePort = await freePort();
    baseline = await spawnNode('bench/baseline-server.mjs', { DATABASE_URL: cluster.db.url, PORT: String(baselinePort) }, 'baseline ready', 'baseline');
    const { token } = await seedOrg(cluster.url, cluster.operatorToken);
    let sampleId;
    for (let i = 0; i < 200; i++) sampleId = (await api(cluster.url, 'POST', '/v1/samples', token, { name: `seed-${i}`, type: 'blood' })).data.id;
    await gatherStatistics(cluster.db.url);
    return {
      cluster,
      baseUrl: `http://127.0.0.1:${baselinePort}`,
      token,
      sampleId,
      stop: async () => {
        baseline.kill('SIGTERM');
        await cluster.stop();
      },
    };
  } catch (err) {
    baseline?.kill('SIGTERM');
    await cluster.stop();
    throw err;
  }
}
