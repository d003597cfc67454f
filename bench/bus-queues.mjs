// Classic vs quorum queues on this machine's RabbitMQ, the way the bus uses them
// (libs/kit/src/bus.ts): a topic exchange, persistent messages, publisher
// confirms, manual acks with a prefetch of 20, and for every durable queue Q its
// Q.retry (per-message TTL, dead-letters back to Q) and Q.dlq.
//
// For each type (BENCH_QUEUE_TYPES, default "classic,quorum"):
// - publish: messages of ~600 bytes (an event's size) published to the exchange
//   and confirmed, in batches of 1 (an outbox relay pass with one event) and of 100
//   (a full relay batch), each for BENCH_SECONDS (default 4) s;
// - consume: the queue filled with BENCH_CONSUME (default 20,000) messages, then
//   drained by one consumer (prefetch 20, one ack per message), for at most
//   BENCH_SECONDS s;
// - dead-letter: BENCH_DEAD_LETTER (default 2,000) messages put in Q.retry with a
//   1 ms TTL, timed until all are back in Q (the retry path; at-least-once on
//   quorum queues);
// - declare: a deployment's queues, DURABLE_QUEUES (6 routes) x 3 = 18 queues and
//   their bindings, with the bus's arguments, as every process (and every test
//   stack, under its own exchange) declares them on connect: created (first
//   declaration), declared again (they exist), and deleted; BENCH_STACKS (default
//   5) times, the median reported.
//
// Everything it declares is named bench.busq.<random> and deleted at the end.
// AMQP_URL (default amqp://guest:guest@127.0.0.1:5672). Prints one JSON object.
// Bounded: a confirm that does not come within 15 s fails the run (a broker out
// of file handles stops confirming to classic queues without an error), and the
// whole run ends after BENCH_LIMIT_S (default 180) s whatever it is waiting for.
import { randomBytes } from 'node:crypto';
import { cpus } from 'node:os';
import amqp from 'amqplib';

const URL = process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const SECONDS = Number(process.env.BENCH_SECONDS ?? 4);
const CONSUME = Number(process.env.BENCH_CONSUME ?? 20_000);
const DEAD_LETTER = Number(process.env.BENCH_DEAD_LETTER ?? 2_000);
const STACKS = Number(process.env.BENCH_STACKS ?? 5);
const TYPES = (process.env.BENCH_QUEUE_TYPES ?? 'classic,quorum').split(',');
const LIMIT_S = Number(process.env.BENCH_LIMIT_S ?? 180);

setTimeout(() => {
  console.error(`bus-queues: still running after ${LIMIT_S} s, giving up (queues ${prefix}.* may be left)`);
  process.exit(2);
}, LIMIT_S * 1000).unref();

/** The channel's outstanding publishes confirmed, or an error after 15 s. */
function confirmed(ch) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error('no publisher confirm within 15 s (a blocked broker?)')), 15_000);
  });
  return Promise.race([ch.waitForConfirms(), late]).finally(() => clearTimeout(timer));
}

// the routes of libs/contracts/src/event-routes.ts (EVENT_ROUTES)
const ROUTES = [
  { queue: 'audit.records', bindings: ['audit.record'] },
  { queue: 'jobs.requests', bindings: ['job.requested'] },
  { queue: 'jobs.inbound-webhooks', bindings: ['inbound_webhook.received'] },
  { queue: 'notifications.reactions', bindings: ['environmental.breach', 'job.updated'] },
  { queue: 'webhooks.deliveries', bindings: ['experiment.#', 'sample.#', 'stock_movement.#', 'stock_item.#', 'equipment.#', 'environmental.#'] },
  { queue: 'webhooks.inbound-jobs', bindings: ['inbound_webhook.job_created', 'inbound_webhook.job_rejected'] },
];

/** The bus's queue arguments (durableQueueArguments in libs/kit/src/bus.ts). */
function queueArguments(type, queue, role, expiresMs) {
  const args = { 'x-queue-type': type };
  const safe = type === 'quorum' ? { 'x-dead-letter-strategy': 'at-least-once', 'x-overflow': 'reject-publish' } : {};
  if (role === 'main') {
    if (expiresMs) args['x-expires'] = expiresMs;
    if (type === 'quorum') Object.assign(args, { 'x-delivery-limit': 20, 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': `${queue}.dlq`, ...safe });
  } else if (role === 'retry') {
    Object.assign(args, { 'x-dead-letter-exchange': '', 'x-dead-letter-routing-key': queue, ...safe });
  }
  return args;
}

const prefix = `bench.busq.${randomBytes(3).toString('hex')}`;
const declared = new Set();
const exchanges = new Set();

async function declareRoute(ch, type, exchange, route, expiresMs) {
  const queue = `${exchange}.${route.queue}`;
  for (const role of ['main', 'retry', 'dlq']) {
    const name = role === 'main' ? queue : `${queue}.${role}`;
    await ch.assertQueue(name, { durable: true, arguments: queueArguments(type, queue, role, expiresMs) });
    declared.add(name);
  }
  for (const b of route.bindings) await ch.bindQueue(queue, exchange, b);
  return queue;
}

const body = Buffer.from(
  JSON.stringify({
    id: '01a216d0-1145-7430-a130-028381d2a93c',
    type: 'sample.created',
    org_id: '01a216d0-0000-7000-8000-000000000001',
    occurred_at: new Date().toISOString(),
    request_id: 'r'.repeat(26),
    data: { id: '01a216d0-1145-7430-a130-028381d2a93d', name: 'sample', notes: 'x'.repeat(300), tags: ['a', 'b', 'c'] },
  }),
);
const publishOptions = (i) => ({ persistent: true, messageId: String(i), contentType: 'application/json', timestamp: Math.floor(Date.now() / 1000) });

async function publishRate(ch, exchange, batch) {
  let sent = 0;
  const start = process.hrtime.bigint();
  const end = Date.now() + SECONDS * 1000;
  while (Date.now() < end) {
    for (let i = 0; i < batch; i++) ch.publish(exchange, 'sample.created', body, publishOptions(sent + i));
    await confirmed(ch);
    sent += batch;
  }
  const s = Number(process.hrtime.bigint() - start) / 1e9;
  return { messages: sent, per_s: Math.round(sent / s), ms_per_confirm: +((s * 1000) / (sent / batch)).toFixed(2) };
}

async function fill(ch, queue, n) {
  for (let sent = 0; sent < n; sent += 500) {
    for (let i = 0; i < Math.min(500, n - sent); i++) ch.sendToQueue(queue, body, publishOptions(i));
    await confirmed(ch);
  }
}

async function consumeRate(conn, queue, n) {
  const ch = await conn.createChannel();
  await ch.prefetch(20);
  let got = 0;
  const start = process.hrtime.bigint();
  await new Promise((resolve) => {
    const timer = setTimeout(resolve, SECONDS * 1000);
    void ch.consume(queue, (m) => {
      if (!m) return;
      ch.ack(m);
      if (++got === n) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  const s = Number(process.hrtime.bigint() - start) / 1e9;
  await ch.close();
  return { messages: got, per_s: Math.round(got / s) };
}

async function deadLetterRate(ch, queue, n) {
  await ch.purgeQueue(queue);
  const start = process.hrtime.bigint();
  for (let sent = 0; sent < n; sent += 500) {
    for (let i = 0; i < Math.min(500, n - sent); i++) ch.sendToQueue(`${queue}.retry`, body, { ...publishOptions(i), expiration: '1' });
    await confirmed(ch);
  }
  const end = Date.now() + SECONDS * 5000;
  let count = 0;
  while (Date.now() < end && (count = (await ch.checkQueue(queue)).messageCount) < n) await new Promise((r) => setTimeout(r, 5));
  const s = Number(process.hrtime.bigint() - start) / 1e9;
  return { messages: count, per_s: Math.round(count / s) };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;

async function declareTimes(conn, type) {
  const create = [];
  const again = [];
  const remove = [];
  for (let k = 0; k < STACKS; k++) {
    const ch = await conn.createChannel();
    const exchange = `${prefix}.${type}.stack${k}`;
    exchanges.add(exchange);
    let t0 = process.hrtime.bigint();
    await ch.assertExchange(exchange, 'topic', { durable: true });
    for (const r of ROUTES) await declareRoute(ch, type, exchange, r, 600_000);
    create.push(ms(t0));
    t0 = process.hrtime.bigint();
    for (const r of ROUTES) await declareRoute(ch, type, exchange, r, 600_000);
    again.push(ms(t0));
    t0 = process.hrtime.bigint();
    for (const r of ROUTES) {
      const q = `${exchange}.${r.queue}`;
      for (const name of [q, `${q}.retry`, `${q}.dlq`]) {
        await ch.deleteQueue(name);
        declared.delete(name);
      }
    }
    await ch.deleteExchange(exchange);
    exchanges.delete(exchange);
    remove.push(ms(t0));
    await ch.close();
  }
  const round = (x) => Math.round(x);
  return {
    queues: ROUTES.length * 3,
    create_ms: round(median(create)),
    declare_again_ms: round(median(again)),
    delete_ms: round(median(remove)),
    create_all_ms: create.map(round),
  };
}

const conn = await amqp.connect(URL);
const result = { date: new Date().toISOString(), cores: cpus().length, cpu: cpus()[0]?.model, seconds: SECONDS, types: {} };
try {
  for (const type of TYPES) {
    const ch = await conn.createConfirmChannel();
    const exchange = `${prefix}.${type}`;
    exchanges.add(exchange);
    await ch.assertExchange(exchange, 'topic', { durable: true });
    const queue = await declareRoute(ch, type, exchange, { queue: 'bench', bindings: ['sample.#'] });
    const r = {};
    r.publish_batch_1 = await publishRate(ch, exchange, 1);
    await ch.purgeQueue(queue);
    r.publish_batch_100 = await publishRate(ch, exchange, 100);
    await ch.purgeQueue(queue);
    await fill(ch, queue, CONSUME);
    r.consume = await consumeRate(conn, queue, CONSUME);
    r.dead_letter = await deadLetterRate(ch, queue, DEAD_LETTER);
    await ch.close();
    r.declare_stack = await declareTimes(conn, type);
    result.types[type] = r;
    console.error(type, JSON.stringify(r));
  }
} finally {
  const ch = await conn.createChannel();
  for (const q of declared) await ch.deleteQueue(q).catch(() => undefined);
  for (const e of exchanges) await ch.deleteExchange(e).catch(() => undefined);
  await conn.close();
}
console.log(JSON.stringify(result, null, 2));
