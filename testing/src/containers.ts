import { existsSync } from 'node:fs';

interface Stoppable {
  stop(): Promise<unknown>;
}

const started: Stoppable[] = [];

/** Whether a Docker engine is plausibly there (socket or DOCKER_HOST) and answers. */
async function dockerAnswers(): Promise<boolean> {
  if (!process.env.DOCKER_HOST && !existsSync('/var/run/docker.sock')) return false;
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    await getContainerRuntimeClient();
    return true;
  } catch {
    return false;
  }
}

/**
 * Starts PostgreSQL 15 and RabbitMQ in containers and points DATABASE_URL and
 * AMQP_URL at them (jest runs in band, so the test files see these variables).
 */
export async function startContainersIfDockerAnswers(): Promise<boolean> {
  if (!(await dockerAnswers())) return false;
  const { GenericContainer, Wait } = await import('testcontainers');
  const postgres = await new GenericContainer('postgres:15-alpine')
    .withEnvironment({ POSTGRES_HOST_AUTH_METHOD: 'trust', POSTGRES_DB: 'test' })
    .withExposedPorts(5432)
    .withWaitStrategy(Wait.forLogMessage(/database system is ready to accept connections/, 2))
    .start();
  started.push(postgres);
  const rabbit = await new GenericContainer('rabbitmq:3-alpine')
    .withExposedPorts(5672)
    .withWaitStrategy(Wait.forLogMessage(/Server startup complete/))
    .start();
  started.push(rabbit);
  process.env.DATABASE_URL = `postgres://postgres@${postgres.getHost()}:${postgres.getMappedPort(5432)}/test`;
  process.env.AMQP_URL = `amqp://guest:guest@${rabbit.getHost()}:${rabbit.getMappedPort(5672)}`;
  return true;
}

export async function stopContainers(): Promise<void> {
  while (started.length) await started.pop()!.stop();
}
