import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './cluster.js';

/**
 * PgBouncer in transaction mode in front of a PostgreSQL server, as production
 * runs at scale (docs/operations.md, Pooler): the services' pools connect to it,
 * and each transaction (or statement outside one) gets whichever server
 * connection is free. What a session keeps (a prepared statement, a SET, a
 * session advisory lock, LISTEN, a temporary table) does not follow a client
 * from one transaction to the next, so running the cluster through it proves
 * the services keep none.
 */
export interface PgBouncer {
  /** the pooler's URL for a database (the upstream URL's user and password, the pooler's address) */
  url(database: string): string;
  port: number;
  /** what PgBouncer logged, for failure messages */
  output(): string;
  stop(): Promise<void>;
}

export interface PgBouncerOptions {
  /** PostgreSQL behind it (user, password and address; the database is the client's) */
  upstreamUrl: string;
  /** listening port; a free one unless given */
  port?: number;
  /** server connections per database and user (PgBouncer's default_pool_size) */
  poolSize?: number;
  /** server connections per database, all users together (max_db_connections; 0: no cap) */
  maxDbConnections?: number;
  /** client connections PgBouncer accepts in all */
  maxClientConn?: number;
}

const candidates = ['pgbouncer', '/usr/sbin/pgbouncer', '/usr/bin/pgbouncer'];

/**
 * The pgbouncer binary. `npm test` (scripts/test.mjs) installs Debian's package
 * first when it is missing and it can (root, apt-get), and names the suites that
 * need it when it cannot.
 */
function pgbouncerBinary(): string {
  const found = candidates.find((c) => spawnSync(c, ['--version'], { stdio: 'ignore' }).status === 0);
  if (!found) throw new Error('pgbouncer is not installed (apt-get install -y pgbouncer; npm test installs it when it runs as root)');
  return found;
}

/** An ini value: PgBouncer's connection strings take libpq's quoting. */
const connValue = (v: string) => `'${v.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;

/** Starts PgBouncer and resolves once it listens. */
export async function startPgBouncer(opts: PgBouncerOptions): Promise<PgBouncer> {
  const binary = pgbouncerBinary();
  const upstream = new URL(opts.upstreamUrl);
  const port = opts.port ?? (await freePort());
  const dir = await mkdtemp(join(tmpdir(), 'lab-pgbouncer-'));
  const server = [
    `host=${connValue(upstream.hostname || '127.0.0.1')}`,
    `port=${upstream.port || '5432'}`,
    `user=${connValue(decodeURIComponent(upstream.username || 'postgres'))}`,
    ...(upstream.password ? [`password=${connValue(decodeURIComponent(upstream.password))}`] : []),
  ].join(' ');
  const ini = [
    '[databases]',
    // every database the clients name, through one pool per database, as the upstream's user
    `* = ${server}`,
    '[pgbouncer]',
    'listen_addr = 127.0.0.1',
    `listen_port = ${port}`,
    'unix_socket_dir =',
    // clients are trusted (loopback); every server login is the upstream URL's user
    'auth_type = any',
    'pool_mode = transaction',
    `max_client_conn = ${opts.maxClientConn ?? 2000}`,
    `default_pool_size = ${opts.poolSize ?? 20}`,
    `max_db_connections = ${opts.maxDbConnections ?? 0}`,
    // no ignore_startup_parameters: a client sending one PgBouncer does not track
    // (`options`, say) is refused, not served with the parameter silently dropped
    'log_connections = 0',
    'log_disconnections = 0',
    'stats_period = 3600',
    '',
  ].join('\n');
  const config = join(dir, 'pgbouncer.ini');
  await writeFile(config, ini);
  // PgBouncer refuses to run as root: as root it is started as nobody, who must read the file
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    await chmod(dir, 0o755);
    await chmod(config, 0o644);
  }
  const child: ChildProcess = spawn(binary, [...(asRoot ? ['-u', 'nobody'] : []), config], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const onData = (b: Buffer) => {
    output = (output + b.toString()).slice(-16_000);
  };
  child.stdout?.on('data', onData);
  child.stderr?.on('data', onData);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`pgbouncer did not listen on ${port} within 10 s:\n${output}`)), 10_000);
      const check = () => {
        if (!output.includes(`listening on 127.0.0.1:${port}`)) return;
        clearTimeout(timer);
        resolve();
      };
      child.stdout?.on('data', check);
      child.stderr?.on('data', check);
      void exited.then(() => {
        clearTimeout(timer);
        reject(new Error(`pgbouncer exited before it listened:\n${output}`));
      });
    });
  } catch (err) {
    child.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    port,
    url: (database) => {
      const u = new URL(opts.upstreamUrl);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      u.pathname = `/${database}`;
      return u.toString();
    },
    output: () => output,
    stop: async () => {
      // SIGTERM: immediate shutdown, clients and server connections closed
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
      await rm(dir, { recursive: true, force: true });
    },
  };
}
