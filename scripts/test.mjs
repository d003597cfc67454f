#!/usr/bin/env node
/**
 * `npm test`: finds the servers the integration tests use, says which at the
 * start, then builds and runs the whole jest suite against them.
 *
 * For each of PostgreSQL, RabbitMQ and Redis: the variable (DATABASE_URL,
 * AMQP_URL, REDIS_URL) when it is set, and it must answer; otherwise the server
 * on its default local port, started first when it is installed but stopped
 * (the same commands an operator of this machine would type). A server that
 * cannot be found is named at the start with every suite that needs it; those
 * suites are not run, the rest are, and the command fails at the end, so a
 * missing server never passes as a green run or a silent skip.
 *
 * CI (.ci/run) calls this same command with the variables unset.
 * Arguments after `npm test --` go to jest (e.g. a path to run one suite).
 *
 * Then, on a whole run, a second pass through PgBouncer (pooledSuites below).
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, globSync, readFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect as amqpConnect } from 'amqplib';
import pg from 'pg';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/**
 * What a suite needs, read from its text: the variables it reads, or the
 * helpers that cannot run without the server (the process cluster needs both
 * PostgreSQL and RabbitMQ). Reading more than it strictly needs only names a
 * suite too many when a server is missing.
 */
const servers = [
  {
    name: 'PostgreSQL',
    variable: 'DATABASE_URL',
    defaultUrl: 'postgres://postgres@127.0.0.1:5432/test',
    tool: 'pg_ctlcluster',
    start: 'pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start',
    waitSeconds: 60,
    neededBy: /DATABASE_URL|databaseUrl|startCluster|describeFault/,
    check: checkPostgres,
  },
  {
    name: 'RabbitMQ',
    variable: 'AMQP_URL',
    defaultUrl: 'amqp://guest:guest@127.0.0.1:5672',
    tool: 'rabbitmq-server',
    start: 'rabbitmq-server -detached',
    // RabbitMQ takes tens of seconds to accept connections after it starts.
    waitSeconds: 120,
    neededBy: /AMQP_URL|amqpUrl|startCluster|describeFault/,
    check: checkAmqp,
  },
  {
    name: 'Redis',
    variable: 'REDIS_URL',
    defaultUrl: 'redis://127.0.0.1:6379',
    tool: 'redis-server',
    // keeps nothing on disk: the tests' counters are throwaway
    start: `redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no --dir ${os.tmpdir()}`,
    waitSeconds: 30,
    neededBy: /REDIS_URL|redisUrl/,
    check: checkRedis,
  },
];

/**
 * The second pass: process-cluster suites that between them write, read (shared
 * reads), group-commit, relay outboxes, store files and migrate in every service
 * but equipment, run again through PgBouncer in transaction mode in front of the
 * same PostgreSQL, as production runs at scale (docs/operations.md, Pooler):
 * DATABASE_URL the pooler, DATABASE_DIRECT_URL PostgreSQL itself (where they
 * migrate), no named statements (PgBouncer 1.18 has no protocol-level prepared
 * statements), and few server connections for all the cluster's pools. Debian's
 * package is installed when missing, as root with apt-get; when it cannot be,
 * the start says so and the run fails, as for a missing server. Only on a whole
 * run: arguments after `npm test --` choose the suites.
 */
const pooledSuites = [
  'testing/test/faults/scale-out.e2e.test.ts',
  'testing/test/faults/kill9-keyed-writes.e2e.test.ts',
  'testing/test/faults/idempotency-race.e2e.test.ts',
  // raw files and job artifacts stored in the database in chunks
  'testing/test/files-across-replicas.e2e.test.ts',
];
const pgbouncerBinaries = ['pgbouncer', '/usr/sbin/pgbouncer'];
/** Server connections per database (all of a cluster's processes share one database). */
const pooledServerConnections = 20;

/** The pgbouncer binary and its version, installed first when it is missing and can be: { binary, version, how } or { missing }. */
function findPgBouncer() {
  const version = (binary) => spawnSync(binary, ['--version'], { encoding: 'utf8' });
  const installed = () => pgbouncerBinaries.find((b) => version(b).status === 0);
  let binary = installed();
  let how = 'installed';
  if (!binary) {
    if (process.getuid?.() !== 0 || !hasTool('apt-get'))
      return { missing: 'pgbouncer is not installed, and installing it here needs root and apt-get (apt-get install -y pgbouncer)' };
    console.log('npm test: installing PgBouncer: apt-get update && apt-get install -y pgbouncer');
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    spawnSync('sh', ['-c', 'apt-get update -q && apt-get install -y -q pgbouncer'], { stdio: ['ignore', 'ignore', 'inherit'], env });
    binary = installed();
    if (!binary) return { missing: 'apt-get install -y pgbouncer did not install it' };
    how = 'installed here';
  }
  return { binary, version: version(binary).stdout.split('\n')[0].trim(), how };
}

/** A free port on the loopback interface: PgBouncer's usual 6432 when nothing listens there. */
async function poolerPort() {
  if (!(await portOpen('127.0.0.1', 6432))) return 6432;
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** The same database through the pooler. */
function pooledUrl(url, port) {
  const u = new URL(url);
  u.hostname = '127.0.0.1';
  u.port = String(port);
  return u.toString();
}

/** Runs the pooled suites through a PgBouncer started for them (testing, built by now). */
async function pooledPass(env, port) {
  const { startPgBouncer } = (await import('../testing/dist/pgbouncer.js')).default;
  const bouncer = await startPgBouncer({ upstreamUrl: env.DATABASE_URL, port, poolSize: pooledServerConnections });
  try {
    const url = pooledUrl(env.DATABASE_URL, port);
    console.log(`npm test: through PgBouncer (${redact(url)}, transaction mode): ${pooledSuites.join(' ')}`);
    const pooledEnv = { ...env, DATABASE_URL: url, DATABASE_DIRECT_URL: env.DATABASE_URL, DATABASE_PREPARED_STATEMENTS: 'false' };
    const code = await run('jest', ['--runInBand', ...pooledSuites], pooledEnv);
    // what the pooler refused or lost, beside the suites' failures (its WARNINGs are the
    // server connections a dropped cluster database closed: expected)
    const errors = bouncer
      .output()
      .split('\n')
      .filter((line) => / (ERROR|FATAL) /.test(line));
    if (code !== 0 && errors.length) console.log(`npm test: PgBouncer's errors during the pass:\n${errors.slice(-20).join('\n')}`);
    return code;
  } finally {
    await bouncer.stop();
  }
}

function portOpen(host, port) {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port, timeout: 1000 });
    const done = (open) => {
      socket.destroy();
      resolve(open);
    };
    socket.once('connect', () => done(true));
    socket.once('timeout', () => done(false));
    socket.once('error', () => done(false));
  });
}

async function waitForPort(host, port, seconds) {
  const until = Date.now() + seconds * 1000;
  while (Date.now() < until) {
    if (await portOpen(host, port)) return true;
    await new Promise((r) => setTimeout(r, 500));
  }
  return false;
}

const hasTool = (tool) => spawnSync('sh', ['-c', `command -v ${tool}`], { stdio: 'ignore' }).status === 0;

/** Connects; on the default URL, creates the `test` database when the server lacks it. */
async function checkPostgres(url, isDefault) {
  const tryConnect = async (u) => {
    const client = new pg.Client({ connectionString: u, connectionTimeoutMillis: 5000 });
    await client.connect();
    await client.end();
  };
  try {
    await tryConnect(url);
  } catch (e) {
    if (!isDefault || e.code !== '3D000') throw e;
    const admin = new URL(url);
    admin.pathname = '/postgres';
    const client = new pg.Client({ connectionString: admin.toString(), connectionTimeoutMillis: 5000 });
    await client.connect();
    try {
      await client.query('create database test');
    } finally {
      await client.end();
    }
    await tryConnect(url);
  }
}

async function checkAmqp(url) {
  const connection = await amqpConnect(url);
  await connection.close();
}

/** A PING in Redis's wire protocol: enough to know it is Redis and it answers. */
function checkRedis(url) {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: hostname, port: Number(port || 6379), timeout: 5000 });
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (data) => {
      socket.destroy();
      if (data.toString().startsWith('+PONG')) resolve();
      else reject(new Error(`answered ${JSON.stringify(data.toString().trim())} to PING`));
    });
    socket.once('timeout', () => {
      socket.destroy();
      reject(new Error('no answer to PING'));
    });
    socket.once('error', reject);
  });
}

/** Where the tests find one server: { url, how } or { missing }. */
async function findServer(server) {
  const named = process.env[server.variable];
  if (named) {
    // A server the caller named must answer: testing less than asked is no pass.
    await server.check(named, false).catch((e) => {
      throw new Error(`${server.name} at ${server.variable} (${redact(named)}) does not answer: ${e.message}`);
    });
    return { url: named, how: `from ${server.variable}` };
  }
  const { hostname, port } = new URL(server.defaultUrl);
  let how = 'on its default port';
  if (!(await portOpen(hostname, Number(port)))) {
    if (!hasTool(server.tool)) return { missing: `nothing listens on ${hostname}:${port} and ${server.tool} is not installed` };
    console.log(`npm test: starting ${server.name}: ${server.start}`);
    spawnSync('sh', ['-c', server.start], { stdio: 'inherit' });
    if (!(await waitForPort(hostname, Number(port), server.waitSeconds))) {
      return { missing: `started with "${server.start}" but ${hostname}:${port} did not open within ${server.waitSeconds} s` };
    }
    how = 'started here, on its default port';
  }
  try {
    await server.check(server.defaultUrl, true);
  } catch (e) {
    return { missing: `${hostname}:${port} is open but ${server.defaultUrl} does not answer: ${e.message}` };
  }
  return { url: server.defaultUrl, how };
}

const redact = (url) => url.replace(/\/\/([^:/@]+):[^@]*@/, '//$1:***@');

/** The integration and end-to-end suites, as jest.config.js matches them. */
function integrationSuites() {
  return globSync('{libs/*,services/*,services/gateway/packages/*,testing}/test/**/*.{int,e2e}.test.ts', { cwd: root })
    .filter((f) => !f.includes('node_modules'))
    .sort();
}

const dockerAnswers = () => Boolean(process.env.DOCKER_HOST) || existsSync('/var/run/docker.sock');

function run(command, args, env) {
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd: root, env, stdio: 'inherit' });
    child.once('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0)));
  });
}

async function main() {
  const env = { ...process.env };
  const missing = [];
  console.log('npm test: servers for the integration and end-to-end tests');
  for (const server of servers) {
    const found = await findServer(server);
    if (found.url) {
      env[server.variable] = found.url;
      console.log(`  ${server.name.padEnd(10)} ${redact(found.url)} (${found.how})`);
    } else {
      console.log(`  ${server.name.padEnd(10)} NOT FOUND: ${found.missing}`);
      missing.push(server);
    }
  }

  // the pooler of the second pass, in front of the PostgreSQL found; the budget suite needs it on any run
  const wholeRun = process.argv.length <= 2;
  let pooler;
  if (env.DATABASE_URL) {
    pooler = findPgBouncer();
    if (pooler.missing) console.log(`  ${'PgBouncer'.padEnd(10)} NOT FOUND: ${pooler.missing}`);
    else {
      pooler.port = await poolerPort();
      const then = wholeRun ? `; after the suites, ${pooledSuites.length} cluster suites again through it` : '';
      console.log(
        `  ${'PgBouncer'.padEnd(10)} ${redact(pooledUrl(env.DATABASE_URL, pooler.port))} (${pooler.version}, ${pooler.how}; transaction mode${then})`,
      );
    }
  }

  // Without a local PostgreSQL and RabbitMQ, a Docker engine can still give them
  // (the harness's global setup starts testcontainers when both are unset).
  const containers = dockerAnswers() && !env.DATABASE_URL && !env.AMQP_URL ? missing.filter((s) => s.variable !== 'REDIS_URL') : [];
  for (const s of containers) console.log(`  ${s.name}: the tests start it in a container (a Docker engine answers)`);
  const absent = missing.filter((s) => !containers.includes(s));

  // What cannot run: the suites that need a server not found, or a PgBouncer of
  // their own when none can be had (then the pass through one is left out too).
  const lacking = [...absent, ...(pooler?.missing ? [{ name: 'PgBouncer', neededBy: /startPgBouncer/ }] : [])];
  const notRun = [];
  if (lacking.length) {
    for (const suite of integrationSuites()) {
      const text = readFileSync(path.join(root, suite), 'utf8');
      const needs = lacking.filter((s) => s.neededBy.test(text)).map((s) => s.name);
      if (needs.length) notRun.push({ suite, needs });
    }
    const pass = pooler?.missing ? ', and the pass through PgBouncer,' : '';
    console.log(`npm test: ${notRun.length} suites${pass} cannot run without ${lacking.map((s) => s.name).join(' and ')}:`);
    for (const { suite, needs } of notRun) console.log(`  ${suite} (needs ${needs.join(', ')})`);
  }

  const build = await run('npm', ['run', 'build', '--silent'], env);
  if (build !== 0) return build;

  // The caller's arguments first: an array option such as this one would take
  // a path that followed it as one more pattern.
  const ignore = notRun.map(({ suite }) => `/${suite.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`);
  const ignoreArgs = ignore.length ? ['/node_modules/', '/dist/', ...ignore].map((p) => `--testPathIgnorePatterns=${p}`) : [];
  const jestEnv = { ...env, NODE_OPTIONS: `--experimental-vm-modules ${env.NODE_OPTIONS ?? ''}`.trim() };
  const code = await run('jest', ['--runInBand', ...process.argv.slice(2), ...ignoreArgs], jestEnv);
  const pooledCode = wholeRun && pooler?.port && env.AMQP_URL ? await pooledPass(jestEnv, pooler.port) : 0;

  if (notRun.length || (wholeRun && pooler?.missing)) {
    console.log(`npm test: incomplete: ${notRun.length} suites were not run (no ${lacking.map((s) => s.name).join(' or ')}); see the list at the start`);
    return code || pooledCode || 1;
  }
  return code || pooledCode;
}

main().then(
  (code) => process.exit(code),
  (e) => {
    console.error(`npm test: ${e.message}`);
    process.exit(1);
  },
);
