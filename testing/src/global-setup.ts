import pg from 'pg';
import { connect } from 'amqplib';
import { startContainersIfDockerAnswers } from './containers';
import { deleteStaleTestQueues } from './queues';

/**
 * Backing servers for the integration run (npm test, scripts/test.mjs, sets the
 * variables to the servers it found), in this order of preference:
 * DATABASE_URL / AMQP_URL when set;
 * else PostgreSQL and RabbitMQ in testcontainers when a Docker engine answers;
 * else nothing: the suites that need a server fail (describeWithServers) and
 * the others use the embedded PGlite and in-process bus.
 * Fails the run at once when a named server does not answer, instead of letting
 * every test time out or test less.
 */
export default async function globalSetup(): Promise<void> {
  if (!process.env.DATABASE_URL && !process.env.AMQP_URL) await startContainersIfDockerAnswers();
  if (process.env.DATABASE_URL) {
    const c = new pg.Client({ connectionString: process.env.DATABASE_URL, connectionTimeoutMillis: 5000 });
    await c.connect().catch((e: unknown) => {
      throw new Error(`PostgreSQL at DATABASE_URL does not answer: ${(e as Error).message}`);
    });
    await c.end();
  }
  if (process.env.AMQP_URL) {
    const conn = await connect(process.env.AMQP_URL).catch((e: unknown) => {
      throw new Error(`RabbitMQ at AMQP_URL does not answer: ${(e as Error).message}`);
    });
    await conn.close();
    // queues of earlier, interrupted runs (see queues.ts)
    const stale = await deleteStaleTestQueues(process.env.AMQP_URL);
    if (stale) console.info(`deleted ${stale} idle queues left by earlier test runs`);
  }
}
