import pg from 'pg';
import { randomBytes } from 'node:crypto';

/**
 * Backing servers for integration tests. CI sets DATABASE_URL and AMQP_URL to the
 * machine's own PostgreSQL and RabbitMQ; without them the embedded PGlite and the
 * in-process bus stand in (the harness never silently skips a test).
 */
export const backing = {
  databaseUrl: process.env.DATABASE_URL,
  amqpUrl: process.env.AMQP_URL,
  redisUrl: process.env.REDIS_URL,
};

const created: string[] = [];

/** A fresh, empty database on the test server for one test file. */
export async function freshDatabaseUrl(): Promise<string | undefined> {
  if (!backing.databaseUrl) return undefined;
  const name = `lab_t_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: backing.databaseUrl });
  await admin.connect();
  try {
    await admin.query(`create database ${name}`);
  } finally {
    await admin.end();
  }
  created.push(name);
  const url = new URL(backing.databaseUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

/** Drops the databases this test file created. */
export async function dropFreshDatabases(): Promise<void> {
  if (!backing.databaseUrl) return;
  const admin = new pg.Client({ connectionString: backing.databaseUrl });
  await admin.connect();
  try {
    while (created.length) {
      const name = created.pop()!;
      await admin.query(`drop database if exists ${name} with (force)`);
    }
  } finally {
    await admin.end();
  }
}

/** A unique events exchange per stack, so test files never see each other's messages. */
export const uniqueExchange = () => `lab.events.t${randomBytes(4).toString('hex')}`;
