/// <reference types="jest" />
/**
 * Suites that cannot run without a real server. `npm test` (scripts/test.mjs)
 * finds the servers and names, at the start, every suite it cannot run; a suite
 * run some other way without its server fails with the reason instead of turning
 * into a silent skip.
 */
const variables = { postgres: 'DATABASE_URL', rabbitmq: 'AMQP_URL', redis: 'REDIS_URL' } as const;

type Server = keyof typeof variables;

/** `describe` when every server named is there (its variable set), else one failing test that says which is not. */
export function describeWithServers(servers: Server[], title: string, body: () => void): void {
  const unset = servers.map((s) => variables[s]).filter((v) => !process.env[v]);
  if (!unset.length) {
    describe(title, body);
    return;
  }
  describe(title, () => {
    it(`needs ${unset.join(' and ')}`, () => {
      throw new Error(`${unset.join(' and ')} not set: run the tests with npm test, which finds or starts the servers`);
    });
  });
}
