import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, openBus, randomToken, runService, type Bus, type RunningService, type ServiceDefinition } from '@lab/kit';
import { startGateway, type GatewayOptions, type RunningGateway } from '@lab/gateway';
import { backing, dropFreshDatabases, freshDatabaseUrl, uniqueExchange } from './backing.js';
import { deleteRunQueues } from './queues.js';

export interface StackOptions {
  /** services to start (default identity, notebook, audit); unavailable packages are skipped */
  services?: string[];
  /** token cache TTL of the gateway */
  tokenCacheTtlMs?: number;
  /** client-streaming calls in process, as the standalone mode makes them (default: over gRPC) */
  inProcessCalls?: boolean;
  /** proxies the gateway trusts to name the client (X-Forwarded-For), e.g. ['loopback'] */
  trustProxy?: boolean | number | string[];
  /** how the gateway fetches MCP clients' metadata documents (tests serve them from loopback with a test CA) */
  clientDocuments?: GatewayOptions['clientDocuments'];
}

/** Shorthand calls of the management API, as an operator would script them. */
export interface AdminHelpers {
  /** one management call; throws unless the status is the expected one */
  call<T = unknown>(method: string, path: string, body?: unknown, expect?: number): Promise<T>;
  createOrg(body?: { name?: string; modules?: string[]; rate_limit?: { per_minute: number; per_hour: number } }): Promise<Org>;
  createUser(body?: { email?: string; name?: string; password?: string }): Promise<User>;
  putMember(orgId: string, userId: string, role: string, departmentId?: string): Promise<unknown>;
  createApiKey(orgId: string, body: { scopes: string[]; name?: string; user_id?: string }): Promise<IssuedToken>;
  createPat(userId: string, body: { scopes: string[]; name?: string; org_id?: string }): Promise<IssuedToken>;
}

export interface Org {
  id: string;
  name: string;
  modules: string[];
  rate_limit: { per_minute: number; per_hour: number };
}
export interface User {
  id: string;
  email: string;
  name: string | null;
}
export interface IssuedToken {
  id: string;
  token: string;
  scopes: string[];
  user_id?: string | null;
  org_id?: string | null;
}

export interface Stack {
  /** gateway base URL */
  url: string;
  operatorToken: string;
  /** events exchange of this stack (AMQP) */
  exchange: string;
  bus: Bus;
  /** gRPC address by service name */
  services: Record<string, string>;
  /** what a second gateway replica needs to join this stack */
  secret: string;
  databaseUrl: string | undefined;
  dataDir: string;
  admin: AdminHelpers;
  /**
   * Another gateway replica in front of the same services, database, bus and
   * Redis, with its own memory (token cache, answers of keyed writes); the stack's
   * stop() stops it too.
   */
  replica(): Promise<{ url: string; stop(): Promise<void> }>;
  stop(): Promise<void>;
}

const DEFAULT_SERVICES = ['identity', 'notebook', 'audit'];

/**
 * A service's definition, or undefined when its package is not there (yet).
 * The specifier is computed so the build does not depend on every service.
 */
export async function loadDefinition(name: string): Promise<ServiceDefinition | undefined> {
  const specifier = `@lab/${name}`;
  try {
    const mod = (await import(specifier)) as { definition?: ServiceDefinition };
    return mod.definition;
  } catch (err) {
    if (/Cannot find module|Could not locate module/.test((err as Error).message)) return undefined;
    throw err;
  }
}

/**
 * Starts, in this process, the domain services (each on 127.0.0.1:0 with its own
 * schema in one fresh database) and the gateway in front of them. Real PostgreSQL
 * and RabbitMQ when DATABASE_URL / AMQP_URL are set, else PGlite and the
 * in-process bus. Each call gets its own database and events exchange.
 */
export async function startStack(opts: StackOptions = {}): Promise<Stack> {
  const log = createLogger('stack', process.env.TEST_LOG_LEVEL ?? 'silent');
  const secret = randomToken(24);
  const operatorToken = `op_${randomToken(24)}`;
  const dataDir = await mkdtemp(join(tmpdir(), 'lab-stack-'));
  const databaseUrl = await freshDatabaseUrl();
  const exchange = uniqueExchange();
  // opened as a deployment's processes open theirs (every durable queue declared up
  // front, the bundled types bundled), or in-process without a broker
  const bus: Bus = await openBus({ AMQP_URL: backing.amqpUrl, LAB_EVENTS_EXCHANGE: exchange, LAB_BUS_QUEUE_EXPIRES_MS: 600_000 }, log);

  const running: RunningService[] = [];
  const services: Record<string, string> = {};
  const stopAll = async () => {
    for (const s of running.reverse()) await s.stop().catch(() => undefined);
    await bus.close();
    if (backing.amqpUrl) await deleteRunQueues(backing.amqpUrl, exchange);
    await dropFreshDatabases().catch(() => undefined);
    await rm(dataDir, { recursive: true, force: true });
  };
  try {
    for (const name of opts.services ?? DEFAULT_SERVICES) {
      const def = await loadDefinition(name);
      if (!def) continue;
      const svc = await runService(def, {
        log,
        bus,
        secret,
        databaseUrl,
        dataDir,
        grpcAddress: '127.0.0.1:0',
        poolSize: 5,
        peers: (peer) => services[peer],
      });
      running.push(svc);
      services[name] = svc.address;
    }
    const gatewayOptions = {
      port: 0,
      host: '127.0.0.1',
      log,
      secret,
      operatorToken,
      databaseUrl,
      dataDir,
      redisUrl: backing.redisUrl,
      bus,
      services,
      tokenCacheTtlMs: opts.tokenCacheTtlMs,
      shutdownGraceMs: 2_000,
      inProcessCalls: opts.inProcessCalls,
      trustProxy: opts.trustProxy,
      clientDocuments: opts.clientDocuments,
      // counters of their own: stacks share the test Redis, and its client address (127.0.0.1)
      rateLimitPrefix: `lab:test:rl:${exchange}`,
    };
    const gateway = await startGateway(gatewayOptions);
    const replicas = new Set<RunningGateway>();
    return {
      url: gateway.url,
      operatorToken,
      exchange,
      bus,
      services,
      secret,
      databaseUrl,
      dataDir,
      admin: adminHelpers(gateway.url, operatorToken),
      replica: async () => {
        const replica = await startGateway(gatewayOptions);
        replicas.add(replica);
        return {
          url: replica.url,
          stop: async () => {
            if (replicas.delete(replica)) await replica.stop();
          },
        };
      },
      stop: async () => {
        for (const r of replicas) await r.stop();
        await gateway.stop();
        await stopAll();
      },
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

const unique = () =>
  randomToken(6)
    .replace(/[^A-Za-z0-9]/g, 'x')
    .toLowerCase();

function adminHelpers(url: string, operatorToken: string): AdminHelpers {
  const call = async <T>(method: string, path: string, body?: unknown, expect?: number): Promise<T> => {
    const res = await fetch(`${url}/admin/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${operatorToken}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    const ok = expect === undefined ? res.ok : res.status === expect;
    if (!ok) throw new Error(`${method} /admin/v1${path} answered ${res.status}: ${text}`);
    return (text ? (JSON.parse(text) as { data: T }).data : undefined) as T;
  };
  return {
    call,
    createOrg: (body = {}) => call<Org>('POST', '/orgs', { name: `org ${unique()}`, ...body }, 201),
    createUser: (body = {}) => call<User>('POST', '/users', { email: `u${unique()}@example.test`, ...body }, 201),
    putMember: (orgId, userId, role, departmentId) =>
      call('PUT', `/orgs/${orgId}/members/${userId}`, { role, ...(departmentId ? { department_id: departmentId } : {}) }, 200),
    createApiKey: (orgId, body) => call<IssuedToken>('POST', `/orgs/${orgId}/api-keys`, { name: 'key', ...body }, 201),
    createPat: (userId, body) => call<IssuedToken>('POST', `/users/${userId}/pats`, { name: 'pat', ...body }, 201),
  };
}
