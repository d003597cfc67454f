/**
 * Shared pieces of the fault-injection tests: a process cluster, a steady write
 * load that retries with the same Idempotency-Key, an event queue that survives a
 * broker restart, and the switches for the machine's RabbitMQ and PostgreSQL.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { connect } from 'amqplib';
import pg from 'pg';
import { messagesIn } from '@lab/kit';
import type { Cluster } from '../../src/cluster';
import { describeWithServers } from '../../src/servers';
import { pace, waitFor } from '../../src/waits';

/** Why these tests cannot run here, or undefined when they can. */
function faultPrerequisites(tools: ('rabbitmqctl' | 'pg_ctlcluster')[]): string | undefined {
  for (const t of tools) {
    if (spawnSync('sh', ['-c', `command -v ${t}`]).status !== 0) return `${t} is not available on this machine`;
  }
  if (tools.includes('pg_ctlcluster') && !pgVersion()) return 'no PostgreSQL cluster under /etc/postgresql';
  return undefined;
}

/**
 * describe on the machine's PostgreSQL and RabbitMQ (a failing test without them),
 * or describe.skip with a visible warning when the machine lacks the tools that
 * stop and start its servers.
 */
export function describeFault(title: string, tools: ('rabbitmqctl' | 'pg_ctlcluster')[], body: () => void): void {
  const missing = faultPrerequisites(tools);
  if (missing) {
    console.warn(`SKIPPED fault test "${title}": ${missing}`);
    describe.skip(title, body);
  } else {
    describeWithServers(['postgres', 'rabbitmq'], title, body);
  }
}

function pgVersion(): string | undefined {
  try {
    return readdirSync('/etc/postgresql')[0];
  } catch {
    return undefined;
  }
}

function run(cmd: string, args: string[]): void {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 60_000 });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed: ${r.stderr || r.stdout || r.error?.message}`);
}

export const rabbit = {
  stopApp: () => run('rabbitmqctl', ['stop_app']),
  startApp: () => run('rabbitmqctl', ['start_app']),
};

export const postgres = {
  stop: () => run('pg_ctlcluster', ['--skip-systemctl-redirect', pgVersion()!, 'main', 'stop', '-m', 'fast']),
  start: () => run('pg_ctlcluster', ['--skip-systemctl-redirect', pgVersion()!, 'main', 'start']),
};

export interface Answer {
  /** 0: no HTTP answer (connection refused/reset, or the client timeout) */
  status: number;
  body: any;
  text: string;
  /** the answer's headers (absent without an answer) */
  headers?: Headers;
  error?: string;
}

/** One request with a client timeout; a network failure is status 0, never a throw. */
export async function request(
  base: string,
  method: string,
  path: string,
  opts: { token?: string; body?: unknown; headers?: Record<string, string>; timeoutMs?: number } = {},
): Promise<Answer> {
  const headers: Record<string, string> = { ...(opts.headers ?? {}) };
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  if (opts.body !== undefined) headers['content-type'] = 'application/json';
  try {
    const res = await fetch(`${base}${path}`, {
      method,
      headers,
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
      signal: AbortSignal.timeout(opts.timeoutMs ?? 10_000),
    });
    const text = await res.text();
    let body: unknown;
    try {
      body = text ? JSON.parse(text) : undefined;
    } catch {
      body = undefined;
    }
    return { status: res.status, body, text, headers: res.headers };
  } catch (err) {
    return { status: 0, body: undefined, text: '', error: (err as Error).message };
  }
}

/** An organisation without effective rate limits and an API key with every scope. */
export async function seedOrg(cluster: Cluster): Promise<{ orgId: string; token: string }> {
  const admin = async (method: string, path: string, body: unknown) => {
    const r = await request(cluster.url, method, path, { token: cluster.operatorToken, body });
    if (r.status >= 300 || r.status === 0) throw new Error(`${method} ${path} -> ${r.status} ${r.text} ${r.error ?? ''}`);
    return r.body.data;
  };
  const org = await admin('POST', '/admin/v1/orgs', { name: 'faults', rate_limit: { per_minute: 1_000_000, per_hour: 1_000_000 } });
  const user = await admin('POST', '/admin/v1/users', { email: `faults-${randomBytes(4).toString('hex')}@example.org` });
  await admin('PUT', `/admin/v1/orgs/${org.id}/members/${user.id}`, { role: 'admin' });
  const key = await admin('POST', `/admin/v1/orgs/${org.id}/api-keys`, { name: 'faults', scopes: ['*'], user_id: user.id });
  return { orgId: org.id, token: key.token };
}

/** What a write load saw. */
/**
 * Waits until `n` answers of a load since `since` (Date.now()) are of a kind:
 * writes landing ('created') or writes meeting an outage ('failed': no answer or a
 * 5xx). A fault test moves on when the load has reached the state it needs (going,
 * seeing the kill, going again) rather than after a time guessed to be enough.
 */
export function answersSince(result: LoadResult, since: number, kind: 'created' | 'failed', n: number, timeoutMs = 60_000) {
  const counts = kind === 'created' ? (s: number) => s >= 200 && s < 300 : (s: number) => s === 0 || s >= 500;
  return waitFor(
    `${n} write(s) ${kind} since ${new Date(since).toISOString()}`,
    () => result.answers.filter((a) => a.at >= since && counts(a.status)).length >= n,
    { timeoutMs, intervalMs: 50 },
  );
}

export interface LoadResult {
  /** sample ids of every write answered 2xx */
  created: string[];
  /** count of every answer by status (0 = no answer) */
  statuses: Record<number, number>;
  /** writes that never got a 2xx within their retry window */
  abandoned: number;
  /** every answer with the time it arrived (Date.now()) */
  answers: { at: number; status: number }[];
}

/**
 * `writers` concurrent clients creating samples until stop() is called. Each write
 * has its own Idempotency-Key and is retried with the same key on 5xx, 409 (the
 * original is still in progress) and no answer, as the spec advises a client to do.
 */
export function writeLoad(base: string, token: string, writers = 8, retryWindowMs = 60_000) {
  const result: LoadResult = { created: [], statuses: {}, abandoned: 0, answers: [] };
  let stopping = false;
  const one = async (n: number) => {
    const key = `fault-${randomUUID()}`;
    const body = { name: `load ${n}`, type: 'fault' };
    const deadline = Date.now() + retryWindowMs;
    for (let attempt = 0; ; attempt++) {
      const r = await request(base, 'POST', '/v1/samples', { token, body, headers: { 'Idempotency-Key': key } });
      result.statuses[r.status] = (result.statuses[r.status] ?? 0) + 1;
      result.answers.push({ at: Date.now(), status: r.status });
      if (r.status >= 200 && r.status < 300) {
        result.created.push(r.body.data.id);
        return;
      }
      const retryable = r.status === 0 || r.status >= 500 || r.status === 409 || r.status === 429;
      if (!retryable) throw new Error(`write answered ${r.status}: ${r.text}`);
      if (Date.now() > deadline) {
        result.abandoned++;
        return;
      }
      await pace(Math.min(1000, 50 * 2 ** attempt)); // the client's retry backoff
    }
  };
  let counter = 0;
  const loops = Array.from({ length: writers }, async () => {
    while (!stopping) await one(counter++);
  });
  return {
    result,
    /** lets every writer finish (and retry) its current write, then resolves */
    stop: async () => {
      stopping = true;
      await Promise.all(loops);
      return result;
    },
  };
}

/**
 * A durable queue of this test run bound to the cluster's exchange. Durable with
 * x-expires, so it outlives a restart of the broker app and still goes away on its
 * own if the test dies; read with a fresh connection whenever the test is ready.
 */
export async function eventQueue(amqpUrl: string, exchange: string, bindings: string[]) {
  const name = `${exchange}.faulttest.${randomBytes(3).toString('hex')}`;
  const conn = await connect(amqpUrl);
  try {
    const ch = await conn.createChannel();
    await ch.assertExchange(exchange, 'topic', { durable: true });
    await ch.assertQueue(name, { durable: true, arguments: { 'x-expires': 600_000 } });
    for (const b of bindings) await ch.bindQueue(name, exchange, b);
    await ch.close();
  } finally {
    await conn.close();
  }
  return {
    name,
    /**
     * Consumes until every id in `want` arrived as data.id of some message, or the
     * timeout; duplicates (same message id) are counted, not kept twice. Then a
     * marker is put on the queue itself and consumed: whatever was queued before
     * it (a duplicate, an unexpected extra event) has come in too.
     */
    collect: async (want: Iterable<string>, timeoutMs = 60_000) => {
      const missing = new Set(want);
      const byEventId = new Map<string, { type: string; data: { id: string } }>();
      let deliveries = 0;
      const c = await connect(amqpUrl);
      try {
        const ch = await c.createChannel();
        const marker = `marker-${randomUUID()}`;
        let markerSeen = false;
        await ch.consume(name, (m) => {
          if (!m) return;
          // public events come in bundles (decision 068): each event of one counts as a delivery
          for (const msg of messagesIn(m) as { id: string; type: string; data: { id: string } }[]) {
            if (msg.id === marker) {
              markerSeen = true;
              continue;
            }
            deliveries++;
            byEventId.set(msg.id, msg);
            missing.delete(msg.data.id);
          }
          ch.ack(m);
        });
        // what is still missing then is for the caller to name, comparing what came
        await waitFor('every awaited event', () => missing.size === 0, { timeoutMs, intervalMs: 100 }).catch(() => undefined);
        // straight to this queue (the default exchange), so no service sees it
        ch.sendToQueue(name, Buffer.from(JSON.stringify({ id: marker, type: 'test.marker', data: { id: marker } })));
        await waitFor('the marker behind every event queued so far', () => markerSeen, { timeoutMs: 30_000 });
        await ch.close();
      } finally {
        await c.close();
      }
      return { byEventId, deliveries, dataIds: new Set([...byEventId.values()].map((m) => m.data.id)) };
    },
    delete: async () => {
      const c = await connect(amqpUrl).catch(() => undefined);
      if (!c) return;
      try {
        const ch = await c.createChannel();
        await ch.deleteQueue(name);
      } catch {
        // already gone
      } finally {
        await c.close().catch(() => undefined);
      }
    },
  };
}

/** One query on the cluster's database. */
export async function query<T extends pg.QueryResultRow>(url: string, text: string, params: unknown[] = []): Promise<T[]> {
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 10_000 });
  await c.connect();
  try {
    return (await c.query<T>(text, params)).rows;
  } finally {
    await c.end();
  }
}

/** Polls until check() returns a value other than undefined, or throws after the timeout. */
export const eventually = <T>(what: string, check: () => Promise<T | undefined>, timeoutMs: number): Promise<T> =>
  // a check's error is a service still down: polled again, as an answer not there yet
  waitFor(what, () => check().catch(() => undefined), { timeoutMs, intervalMs: 200 });

/** Audit rows per created sample id of an organisation. */
export async function sampleAuditCounts(url: string, orgId: string): Promise<Map<string, number>> {
  const rows = await query<{ record_id: string; n: number }>(
    url,
    `select record_id, count(*)::int as n from audit.records
      where org_id = $1 and resource = 'sample' and action = 'create' group by record_id`,
    [orgId],
  );
  return new Map(rows.map((r) => [r.record_id, r.n]));
}
