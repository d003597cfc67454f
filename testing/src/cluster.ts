import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { deleteRunQueues } from './queues.js';
import { waitFor } from './waits.js';

/** Repository root: this file is testing/src (ts-jest) or testing/dist (built). */
const root = join(__dirname, '..', '..');

/** A free TCP port on the loopback interface (released again before it is returned). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const addr = s.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      s.close(() => resolve(port));
    });
  });
}

export interface ClusterOptions {
  /** service packages, started in this order (each may call the ones before it) */
  services?: string[];
  /**
   * processes per service name (or 'gateway'), 1 unless named. The replicas of a
   * service are `<name>`, `<name>-2`, ...; its callers get them all as one
   * `ipv4:` target, as a headless Service's addresses in Kubernetes.
   */
  replicas?: Record<string, number>;
  /** extra environment per service name (or 'gateway'), the same for each of its replicas */
  serviceEnv?: Record<string, Record<string, string>>;
  databaseUrl?: string;
  /**
   * PostgreSQL itself when databaseUrl is a pooler (DATABASE_DIRECT_URL unless
   * given): the cluster's database is created and dropped there, and the
   * processes get it as their DATABASE_DIRECT_URL (where they migrate)
   */
  directDatabaseUrl?: string;
  amqpUrl?: string;
  redisUrl?: string;
  /** how long one process may take to log its ready line */
  startTimeoutMs?: number;
  /**
   * Rollouts as a Deployment does them (`Cluster.roll`): each service gets a spare
   * port in its callers' target, where a replica's successor starts. And the
   * processes drain on SIGTERM as in a pod (LAB_SHUTDOWN_DRAIN_MS unset: their
   * default, or this process's variable), where otherwise they stop at once, as
   * nothing balances in front of them.
   */
  rollouts?: boolean;
  /**
   * each process its own LAB_DATA_DIR (`<run dir>/<process name>`) instead of one
   * for all, as pods without a shared volume: what one replica writes to its
   * directory the others cannot read
   */
  ownDataDirs?: boolean;
}

interface Proc {
  /** process name: the service, or `<service>-<n>` for its nth replica */
  name: string;
  service: string;
  entry: string;
  env: Record<string, string>;
  metricsPort: number;
  /** the API port (gRPC or HTTP), and the variables that make a process listen on one */
  port: number;
  listen: (port: number) => Record<string, string>;
  child?: ChildProcess;
  /** the last few KB of the process's output, for failure messages */
  tail: string;
}

export interface Cluster {
  /** base URL of the (first) gateway */
  url: string;
  /** base URLs of every gateway replica, the first being `url` */
  urls: string[];
  /** process names of a service's replicas (`notebook`, `notebook-2`, ...) */
  replicasOf(service: string): string[];
  /** gRPC address (`127.0.0.1:port`) of one process of a domain service */
  grpcAddress(name: string): string;
  /** LAB_INTERNAL_SECRET of the cluster: what signs the caller context of a gRPC call */
  internalSecret: string;
  /** LAB_DATA_DIR of a process */
  dataDirOf(name: string): string;
  databaseUrl: string;
  exchange: string;
  operatorToken: string;
  /** base URL of a process's operations port (/readyz, /metrics); name or 'gateway' */
  opsUrl(name: string): string;
  /** recent output of a process, for assertion messages */
  output(name: string): string;
  /** sends a signal (SIGKILL by default) and waits until the process is gone */
  kill(name: string, signal?: NodeJS.Signals): Promise<void>;
  /** starts the process again on the same ports and environment, resolved once ready */
  restart(name: string): Promise<void>;
  /**
   * Replaces one replica as a Deployment's rolling update with maxSurge 1 and
   * maxUnavailable 0 does: a successor on the service's spare port (already in
   * every caller's target, as a new pod's address comes into its Service's), ready
   * (/readyz 200), then SIGTERM to the old process; resolves once that one exited,
   * its port the spare one now. `ready` and `stopping` get the API ports (a balancer
   * in front learns of them). Needs `rollouts`.
   */
  roll(name: string, hooks?: { ready?(port: number): void; stopping?(port: number): void }): Promise<void>;
  /** stops every process, drops the database and the run's queues */
  stop(): Promise<void>;
}

const TAIL = 8_000;

/** Starts a process from its dist/ entry and resolves once it logs its ready line. */
function launch(p: Proc, startTimeoutMs: number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const child = spawn(process.execPath, [join(root, p.entry)], {
      env: { ...process.env, ...p.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    p.child = child;
    let ready = false;
    const readyText = `${p.service} ready`;
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${p.name} did not start within ${startTimeoutMs} ms:\n${p.tail}`));
    }, startTimeoutMs);
    const onData = (b: Buffer) => {
      p.tail = (p.tail + b.toString()).slice(-TAIL);
      if (!ready && p.tail.includes(readyText)) {
        ready = true;
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      if (!ready) reject(new Error(`${p.name} exited (${code ?? signal}) before it was ready:\n${p.tail}`));
    });
  });
}

/** Sends a signal and resolves once the process is gone. */
async function stopProc(p: Proc, signal: NodeJS.Signals): Promise<void> {
  const child = p.child;
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const gone = new Promise<void>((r) => child.once('exit', () => r()));
  child.kill(signal);
  // A process that ignores SIGTERM for long is killed, as the kubelet does after
  // the chart's grace period: a test run must end.
  const timer = signal === 'SIGKILL' ? undefined : setTimeout(() => child.kill('SIGKILL'), 30_000);
  await gone;
  if (timer) clearTimeout(timer);
}

/** The cluster's own database, created on the server (not through a pooler), and its URLs. */
async function createClusterDatabase(baseUrl: string, directUrl: string | undefined) {
  const adminUrl = directUrl ?? baseUrl;
  const name = `lab_cluster_${randomBytes(5).toString('hex')}`;
  await adminQuery(adminUrl, `create database ${name}`);
  const inCluster = (url: string) => {
    const u = new URL(url);
    u.pathname = `/${name}`;
    return u.toString();
  };
  return {
    databaseUrl: inCluster(baseUrl),
    directUrl: directUrl ? inCluster(directUrl) : undefined,
    drop: () => adminQuery(adminUrl, `drop database if exists ${name} with (force)`),
  };
}

/** The running processes of one cluster, and what a test may do to them. */
class ProcessCluster implements Cluster {
  private readonly procs = new Map<string, Proc>();
  /** processes replaced by `roll`, and successors not ready yet: stopped by the cleanup too */
  private readonly others = new Set<Proc>();
  /** each service's spare port (rollouts) */
  private readonly spare = new Map<string, number>();
  /** the services' addresses (`<SERVICE>_ADDR`), given to every process started after them */
  private readonly addrs: Record<string, string> = {};
  readonly urls: string[] = [];
  readonly internalSecret: string;

  constructor(
    private readonly opts: ClusterOptions & { amqpUrl: string; startTimeoutMs: number },
    /** the variables every process gets */
    private readonly common: Record<string, string>,
    private readonly dataDir: string,
    private readonly database: { databaseUrl: string; drop(): Promise<void> },
    readonly exchange: string,
    readonly operatorToken: string,
  ) {
    this.internalSecret = common.LAB_INTERNAL_SECRET!;
  }

  get url(): string {
    return this.urls[0]!;
  }

  get databaseUrl(): string {
    return this.database.databaseUrl;
  }

  /** The domain services in order (each may call the ones before it), then the gateways. */
  async startAll(services: string[], redisUrl: string | undefined): Promise<void> {
    for (const name of services) {
      const ports = await this.startReplicas(name, (port) => ({ GRPC_PORT: String(port), GRPC_HOST: '127.0.0.1' }));
      const targets = ports.map((port) => `127.0.0.1:${port}`);
      this.addrs[`${name.toUpperCase()}_ADDR`] = targets.length === 1 ? targets[0]! : `ipv4:${targets.join(',')}`;
    }
    const gatewayPorts = await this.startReplicas('gateway', (port) => ({
      PORT: String(port),
      HOST: '127.0.0.1',
      LAB_OPERATOR_TOKEN: this.operatorToken,
      ...(redisUrl ? { REDIS_URL: redisUrl } : {}),
      // every gateway of this cluster shares its counters, and no other test's
      LAB_RATE_LIMIT_PREFIX: `lab:test:rl:${this.exchange}`,
    }));
    // the gateways' spare port is no URL to send to until a successor listens there
    if (this.opts.rollouts) gatewayPorts.pop();
    this.urls.push(...gatewayPorts.map((port) => `http://127.0.0.1:${port}`));
  }

  /**
   * Starts the replicas of one service (each on ports of its own, `listen` giving
   * its API port's variables) and resolves with their API ports: the first replica
   * alone, as it migrates the schema, then the others side by side.
   */
  private async startReplicas(service: string, listen: (port: number) => Record<string, string>): Promise<number[]> {
    const ports: number[] = [];
    const replicas: Proc[] = [];
    const count = this.opts.replicas?.[service] ?? 1;
    for (let n = 1; n <= count; n++) {
      const name = n === 1 ? service : `${service}-${n}`;
      const port = await freePort();
      const metricsPort = await freePort();
      ports.push(port);
      const p: Proc = {
        name,
        service,
        entry: `services/${service}/dist/main.js`,
        env: {
          ...this.common,
          ...(this.opts.ownDataDirs ? { LAB_DATA_DIR: join(this.dataDir, name) } : {}),
          ...this.addrs,
          ...listen(port),
          METRICS_PORT: String(metricsPort),
          ...this.opts.serviceEnv?.[service],
        },
        metricsPort,
        port,
        listen,
        tail: '',
      };
      this.procs.set(p.name, p);
      replicas.push(p);
    }
    await launch(replicas[0]!, this.opts.startTimeoutMs);
    await Promise.all(replicas.slice(1).map((p) => launch(p, this.opts.startTimeoutMs)));
    if (this.opts.rollouts) {
      const port = await freePort();
      this.spare.set(service, port);
      ports.push(port);
    }
    return ports;
  }

  private get(name: string): Proc {
    const p = this.procs.get(name);
    if (!p) throw new Error(`no process named ${name} in this cluster`);
    return p;
  }

  replicasOf(service: string): string[] {
    return [...this.procs.values()].filter((p) => p.service === service).map((p) => p.name);
  }

  grpcAddress(name: string): string {
    const port = this.get(name).env.GRPC_PORT;
    if (!port) throw new Error(`${name} serves no gRPC`);
    return `127.0.0.1:${port}`;
  }

  dataDirOf(name: string): string {
    return this.get(name).env.LAB_DATA_DIR!;
  }

  opsUrl(name: string): string {
    return `http://127.0.0.1:${this.get(name).metricsPort}`;
  }

  output(name: string): string {
    return this.get(name).tail;
  }

  kill(name: string, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    return stopProc(this.get(name), signal);
  }

  async restart(name: string): Promise<void> {
    const p = this.get(name);
    await stopProc(p, 'SIGKILL');
    p.tail += `\n--- restart ---\n`;
    await launch(p, this.opts.startTimeoutMs);
  }

  async roll(name: string, hooks: { ready?(port: number): void; stopping?(port: number): void } = {}): Promise<void> {
    const old = this.get(name);
    const port = this.spare.get(old.service);
    if (port === undefined) throw new Error('roll needs a cluster started with rollouts: true');
    const metricsPort = await freePort();
    const next: Proc = {
      ...old,
      env: { ...old.env, ...old.listen(port), METRICS_PORT: String(metricsPort) },
      metricsPort,
      port,
      child: undefined,
      tail: '',
    };
    this.others.add(next);
    await launch(next, this.opts.startTimeoutMs);
    // ready as its readiness probe sees it, the step before a pod joins its Service's endpoints
    await waitFor(
      `${name}'s successor ready`,
      () =>
        fetch(`http://127.0.0.1:${metricsPort}/readyz`).then(
          (r) => r.ok,
          () => false,
        ),
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    this.others.delete(next);
    this.others.add(old);
    this.procs.set(name, next);
    this.spare.set(old.service, old.port);
    if (old.service === 'gateway') this.urls.splice(this.urls.indexOf(`http://127.0.0.1:${old.port}`), 1, `http://127.0.0.1:${port}`);
    hooks.ready?.(port);
    hooks.stopping?.(old.port);
    await stopProc(old, 'SIGTERM');
    next.tail = `${old.tail}\n--- rolled: successor on port ${port} ---\n${next.tail}`;
  }

  async stop(): Promise<void> {
    for (const p of [...this.procs.values(), ...this.others].reverse()) {
      // a second signal skips the drain: the end of a run needs no balancer to catch up
      const stopped = stopProc(p, 'SIGTERM');
      if (this.opts.rollouts) p.child?.kill('SIGINT');
      await stopped;
    }
    await this.database.drop().catch(() => undefined);
    await rm(this.dataDir, { recursive: true, force: true });
    await deleteRunQueues(this.opts.amqpUrl, this.exchange);
  }
}

/**
 * The cluster shape as separate processes (the built dist/ entries, as in
 * production): every named service and the gateway, on a fresh database and on an
 * events exchange of their own. Unlike the in-process stack, single processes can
 * be killed and restarted, which is what fault-injection tests need. A TypeScript
 * port of bench/cluster.mjs's startCluster.
 */
export async function startCluster(opts: ClusterOptions = {}): Promise<Cluster> {
  const baseUrl = opts.databaseUrl ?? process.env.DATABASE_URL;
  const amqpUrl = opts.amqpUrl ?? process.env.AMQP_URL;
  if (!baseUrl || !amqpUrl) throw new Error('startCluster needs PostgreSQL and RabbitMQ (DATABASE_URL, AMQP_URL)');
  const database = await createClusterDatabase(baseUrl, opts.directDatabaseUrl ?? process.env.DATABASE_DIRECT_URL);
  const dataDir = await mkdtemp(join(tmpdir(), 'lab-cluster-'));
  const exchange = `lab.cluster.${randomBytes(4).toString('hex')}`;
  const common: Record<string, string> = {
    AMQP_URL: amqpUrl,
    DATABASE_URL: database.databaseUrl,
    ...(database.directUrl ? { DATABASE_DIRECT_URL: database.directUrl } : {}),
    LAB_INTERNAL_SECRET: randomBytes(24).toString('hex'),
    LAB_EVENTS_EXCHANGE: exchange,
    // every process declares every queue, consumed in this cluster or not
    LAB_BUS_QUEUE_EXPIRES_MS: '600000',
    // nothing balances in front of these processes unless rollouts are tested: a stop is prompt
    ...(opts.rollouts ? {} : { LAB_SHUTDOWN_DRAIN_MS: '0' }),
    LAB_DATA_DIR: dataDir,
    LOG_LEVEL: 'info',
  };
  const operatorToken = `op_${randomBytes(24).toString('hex')}`;
  const cluster = new ProcessCluster({ ...opts, amqpUrl, startTimeoutMs: opts.startTimeoutMs ?? 30_000 }, common, dataDir, database, exchange, operatorToken);
  try {
    await cluster.startAll(opts.services ?? ['identity', 'notebook', 'audit'], opts.redisUrl ?? process.env.REDIS_URL);
  } catch (err) {
    await cluster.stop();
    throw err;
  }
  return cluster;
}

async function adminQuery(url: string, text: string): Promise<void> {
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  await c.connect();
  try {
    await c.query(text);
  } finally {
    await c.end();
  }
}
