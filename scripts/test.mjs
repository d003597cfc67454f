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
  return globSync('{libs,services}/*/test/**/*.{int,e2e}.test.ts', { cwd: root })
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

  // Without a local PostgreSQL and RabbitMQ, a Docker engine can still give them
  // (libs/testing's global setup starts testcontainers when both are unset).
  const containers = dockerAnswers() && !env.DATABASE_URL && !env.AMQP_URL ? missing.filter((s) => s.variable !== 'REDIS_URL') : [];
  for (const s of containers) console.log(`  ${s.name}: the tests start it in a container (a Docker engine answers)`);
  const absent = missing.filter((s) => !containers.includes(s));

  const notRun = [];
  if (absent.length) {
    for (const suite of integrationSuites()) {
      const text = readFileSync(path.join(root, suite), 'utf8');
      const needs = absent.filter((s) => s.neededBy.test(text)).map((s) => s.name);
      if (needs.length) notRun.push({ suite, needs });
    }
    console.log(`npm test: ${notRun.length} suites cannot run without ${absent.map((s) => s.name).join(' and ')}:`);
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

  if (notRun.length) {
    console.log(`npm test: incomplete: ${notRun.length} suites were not run (no ${absent.map((s) => s.name).join(' or ')}); see the list at the start`);
    return code || 1;
  }
  return code;
}

main().then(
  (code) => process.exit(code),
  (e) => {
    console.error(`npm test: ${e.message}`);
    process.exit(1);
  },
);
