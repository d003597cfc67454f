import { spawnSync } from 'node:child_process';
import { DURABLE_QUEUES } from '@lab/contracts';
import { connect } from 'amqplib';

/**
 * Test runs leave no queues behind. Every test stack and cluster declares the
 * deployment's durable queues (with .retry and .dlq) under an exchange of its own;
 * as quorum queues each holds a few of the broker's file handles, and a full test
 * run's hundreds of them, left to expire, exhausted a broker with the common
 * 1,024-descriptor limit: it then accepted TCP connections and never answered
 * them. So each stack and cluster deletes its queues when it stops, and the run
 * starts by deleting idle ones that earlier runs left.
 */

/** The durable queues a deployment on `exchange` declares. */
function deploymentQueues(exchange: string): string[] {
  return DURABLE_QUEUES.flatMap(({ queue }) => [`${exchange}.${queue}`, `${exchange}.${queue}.retry`, `${exchange}.${queue}.dlq`]);
}

/** Queues of this broker with their consumer count, when this host has rabbitmqctl. */
function listQueues(): { name: string; consumers: number }[] {
  const r = spawnSync('rabbitmqctl', ['-q', 'list_queues', 'name', 'consumers', '--no-table-headers'], { encoding: 'utf8', timeout: 30_000 });
  if (r.status !== 0) return [];
  return r.stdout
    .split('\n')
    .map((l) => l.trim().split(/\s+/))
    .filter((cols) => cols.length === 2)
    .map(([name, consumers]) => ({ name: name!, consumers: Number(consumers) }));
}

/**
 * Deletes queues and, if given, an exchange, best effort: leftovers only cost the
 * broker, and expire on their own (x-expires) when they were declared with it.
 */
async function deleteQueues(amqpUrl: string, names: string[], exchange?: string): Promise<void> {
  const conn = await connect(amqpUrl).catch(() => undefined);
  if (!conn) return;
  try {
    const ch = await conn.createChannel();
    ch.on('error', () => undefined);
    for (const q of names) await ch.deleteQueue(q);
    if (exchange) await ch.deleteExchange(exchange);
    await ch.close();
  } catch {
    // best effort
  } finally {
    await conn.close().catch(() => undefined);
  }
}

/**
 * Every queue under a test exchange (the deployment's, and those a test declared
 * itself, as the broker lists them), then the exchange.
 */
export async function deleteRunQueues(amqpUrl: string, exchange: string): Promise<void> {
  const names = new Set(deploymentQueues(exchange));
  for (const q of listQueues()) if (q.name.startsWith(`${exchange}.`)) names.add(q.name);
  await deleteQueues(amqpUrl, [...names], exchange);
}

/** Exchanges tests and benchmarks make: lab.events.t<hex>, lab.cluster.<hex>, lab.bench.<hex>. */
const TEST_QUEUE = /^lab\.(?:events\.t[0-9a-f]{8}|cluster\.[0-9a-f]{8}|bench\.[0-9a-f]{8})\./;

/** Deletes the test queues no one consumes: those that earlier, interrupted runs left. */
export async function deleteStaleTestQueues(amqpUrl: string): Promise<number> {
  const stale = listQueues()
    .filter((q) => q.consumers === 0 && TEST_QUEUE.test(q.name))
    .map((q) => q.name);
  if (stale.length) await deleteQueues(amqpUrl, stale);
  return stale.length;
}
