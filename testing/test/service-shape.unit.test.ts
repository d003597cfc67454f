import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

/**
 * Every domain service has the same files in the same roles, so a newcomer who
 * knows one knows where things are in all of them:
 * - `src/main.ts` starts it (runService), `src/tracing.ts` is loaded first;
 * - `src/index.ts` is its definition: name, schema, migrations, what it wires at start;
 * - `src/server.ts` registers its gRPC handlers (`registerHandlers`), typed from the contracts;
 * - `src/migrate.ts` runs its migrations alone (the chart's migration job);
 * - `migrations/` holds its tables, in SQL;
 * - `test/`.
 * The gateway (the HTTP edge: app.ts, no gRPC service of its own) and the
 * standalone (the whole service in one process) are not domain services.
 */
const root = resolve(__dirname, '../..');
const NOT_DOMAIN = new Set(['gateway', 'standalone']);
const FILES = ['src/main.ts', 'src/tracing.ts', 'src/index.ts', 'src/server.ts', 'src/migrate.ts', 'migrations', 'test'];

const services = readdirSync(join(root, 'services')).filter((name) => !NOT_DOMAIN.has(name) && existsSync(join(root, 'services', name, 'package.json')));

/** What a service's directory lacks of the shape, or what it does otherwise. */
function departures(dir: string): string[] {
  const out = FILES.filter((f) => !existsSync(join(dir, f))).map((f) => `no ${f}`);
  const server = join(dir, 'src/server.ts');
  if (existsSync(server) && !/export (async )?function registerHandlers\(/.test(readFileSync(server, 'utf8')))
    out.push('server.ts does not export registerHandlers');
  const index = join(dir, 'src/index.ts');
  if (existsSync(index) && /\bserver\.add\(/.test(readFileSync(index, 'utf8'))) out.push('index.ts registers handlers itself (server.ts does)');
  return out;
}

describe('one service shape', () => {
  it('knows the services (the check below has something to check)', () => {
    expect(services).toEqual(expect.arrayContaining(['audit', 'identity', 'jobs', 'notebook', 'notifications', 'telemetry']));
  });

  it('finds a service that departs from the shape (the check below can fail)', () => {
    expect(departures(join(root, 'libs/kit'))).toEqual(expect.arrayContaining(['no src/server.ts', 'no src/migrate.ts', 'no migrations']));
  });

  it.each(services)('%s has main, tracing, index, server (registerHandlers), migrate, migrations/ and test/', (name) => {
    expect(departures(join(root, 'services', name))).toEqual([]);
  });
});
